"""DSSE envelopes: an Ed25519 signature over the exact bytes of an in-toto Statement.

https://github.com/secure-systems-lab/dsse/blob/master/envelope.md and protocol.md

Verification works on the payload bytes as decoded from the envelope and hands back those same
bytes: nothing is re-serialised between checking the signature and reading the claims.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qualify.errors import SigningError
from qualify.json_limits import MAX_ENVELOPE_BYTES, TooLarge, canonical_json, describe, strict_loads
from qualify.signing.intoto import Statement
from qualify.signing.keys import key_id

PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


class Signature(BaseModel):
    model_config = _STRICT

    keyid: str
    sig: str = Field(min_length=1)


class Envelope(BaseModel):
    model_config = _STRICT

    payload: str
    # Any string parses; verify() checks it, so a wrong type gets its own error message.
    payload_type: str = Field(alias="payloadType")
    signatures: list[Signature] = Field(min_length=1)

    def to_json(self) -> bytes:
        return canonical_json(self.model_dump(by_alias=True))


@dataclass(frozen=True)
class VerifiedStatement:
    """A statement whose signature checked out, with the exact payload bytes that were signed."""

    statement: Statement
    payload: bytes
    keyid: str

    @property
    def predicate(self) -> dict[str, Any]:
        return self.statement.predicate


def _pae(payload_type: str, payload: bytes) -> bytes:
    # Length-prefixed, so no choice of type and body can make two different pairs sign alike.
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    # DSSE allows standard or URL-safe base64. Only the canonical encoding of the decoded bytes is
    # accepted: otherwise the envelope text could change (padding bits, stray padding) while still
    # verifying, and "the envelope changed" would not imply "verification fails".
    urlsafe = "-" in text or "_" in text
    try:
        data = base64.b64decode(text, altchars=b"-_" if urlsafe else None, validate=True)
    except (binascii.Error, ValueError) as e:
        raise SigningError(f"{what} is not valid base64: {e}") from e
    canonical = base64.urlsafe_b64encode(data) if urlsafe else base64.b64encode(data)
    if canonical.decode("ascii") != text:
        raise SigningError(f"{what} is not canonically encoded base64 (altered padding or mixed alphabets)")
    return data


def sign(payload: bytes, private_key: Ed25519PrivateKey) -> Envelope:
    """Envelope carrying `payload` as an in-toto payload, signed by `private_key`."""
    sig = private_key.sign(_pae(PAYLOAD_TYPE, payload))
    return Envelope.model_validate(
        {
            "payload": _b64encode(payload),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"keyid": key_id(private_key.public_key()), "sig": _b64encode(sig)}],
        }
    )


def _parse_envelope(envelope_bytes: bytes) -> Envelope:
    if len(envelope_bytes) > MAX_ENVELOPE_BYTES:
        raise SigningError(f"envelope is larger than the {MAX_ENVELOPE_BYTES >> 20} MiB limit")
    try:
        raw = strict_loads(envelope_bytes)
    except TooLarge as e:
        raise SigningError(f"envelope is {e}") from e
    except ValueError as e:
        raise SigningError(f"envelope is {e} (truncated, or not a DSSE envelope file?)") from e
    try:
        return Envelope.model_validate(raw)
    except ValidationError as e:
        raise SigningError(f"malformed DSSE envelope: {describe(e)}") from e


def _check_signature(envelope: Envelope, payload: bytes, public_key: Ed25519PublicKey) -> str:
    keyid = key_id(public_key)
    mine = [s for s in envelope.signatures if s.keyid == keyid]
    if not mine:
        present = ", ".join(s.keyid or "(empty)" for s in envelope.signatures)
        raise SigningError(f"no signature for key id {keyid} (envelope is signed by: {present}); wrong public key?")
    signed = _pae(envelope.payload_type, payload)
    for signature in mine:
        try:
            public_key.verify(_b64decode(signature.sig, "signature"), signed)
        except InvalidSignature:
            continue
        return keyid
    raise SigningError(f"signature by key id {keyid} does not verify: the payload or the signature was altered")


def _parse_statement(payload: bytes) -> Statement:
    try:
        return Statement.model_validate(strict_loads(payload))
    except ValidationError as e:
        raise SigningError(f"payload is not a valid in-toto Statement: {describe(e)}") from e
    except ValueError as e:
        raise SigningError(f"payload is not a valid in-toto Statement: {e}") from e


def verify(envelope_bytes: bytes, public_key: Ed25519PublicKey) -> VerifiedStatement:
    """Check a serialized envelope against `public_key`; SigningError says which part failed."""
    envelope = _parse_envelope(envelope_bytes)
    if envelope.payload_type != PAYLOAD_TYPE:
        raise SigningError(f"wrong payloadType {envelope.payload_type!r}, expected {PAYLOAD_TYPE!r}")
    payload = _b64decode(envelope.payload, "envelope payload")
    keyid = _check_signature(envelope, payload, public_key)
    # Only now, with the bytes authenticated, are they parsed as claims.
    return VerifiedStatement(statement=_parse_statement(payload), payload=payload, keyid=keyid)
