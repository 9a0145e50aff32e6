"""Read what is to be rendered: a DSSE envelope (checked with a public key when one is given) or a plain report."""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import jsonschema

from qualify.errors import QualifyError, SigningError
from qualify.hashing import sha256_bytes, sha256_file
from qualify.json_limits import MAX_ENVELOPE_BYTES, TooLarge, check_depth, read_bounded
from qualify.report.build import REPORT_FORMAT
from qualify.report.schema import schema_for
from qualify.signing import dsse
from qualify.signing.keys import load_public_key

_MAX_SCHEMA_ERRORS = 5


class RenderError(QualifyError):
    """The input cannot be rendered at all (unreadable, not JSON, not a report)."""


class SignatureState(StrEnum):
    VALID = "valid"
    INVALID = "invalid"
    NOT_CHECKED = "not_checked"
    UNSIGNED = "unsigned"


@dataclass(frozen=True)
class SignatureStatus:
    state: SignatureState
    detail: str = ""  # key id when valid, the reason when invalid

    @property
    def label(self) -> str:
        if self.state is SignatureState.VALID:
            return f"signature: valid (key id {self.detail})"
        if self.state is SignatureState.INVALID:
            return f"signature: INVALID: {self.detail}"
        if self.state is SignatureState.NOT_CHECKED:
            return "signature: not checked (no key given)"
        return "UNSIGNED: a plain report file, not a signed envelope"

    @property
    def trusted(self) -> bool:
        return self.state is SignatureState.VALID


@dataclass(frozen=True)
class Subject:
    name: str
    sha256: str


@dataclass(frozen=True)
class RenderInput:
    """A report as read from `source`, with what is known about its authenticity."""

    report: dict[str, Any]
    signature: SignatureStatus
    source: str
    source_sha256: str
    subjects: list[Subject] = field(default_factory=list)
    schema_errors: list[str] = field(default_factory=list)


class _Unreadable(RenderError):
    """The input is (or claims to be) an envelope but cannot be read as one: an invalid envelope, whose
    page is still drawn under the do-not-sign-off banner, never a usage error."""


def _json(data: bytes, what: str) -> Any:
    try:
        # Bounded first: json's parser recurses once per level and would die of a RecursionError.
        check_depth(data)
    except TooLarge as e:
        raise _Unreadable(f"{what} is {e}") from e
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RenderError(f"{what} is not valid JSON: {e}") from e


def _statement_report(statement: Any, what: str) -> tuple[dict[str, Any], list[Subject]]:
    if not isinstance(statement, dict) or not isinstance(statement.get("predicate"), dict):
        raise RenderError(f"{what}: the envelope payload is not an in-toto Statement with a predicate")
    subjects = []
    for s in statement.get("subject") or []:
        if isinstance(s, dict) and isinstance(s.get("digest"), dict):
            subjects.append(Subject(name=str(s.get("name", "")), sha256=str(s["digest"].get("sha256", ""))))
    return statement["predicate"], subjects


def _unverified_payload(envelope: dict[str, Any], what: str) -> tuple[dict[str, Any], list[Subject]]:
    # Read without trusting it: the page still shows what an invalid envelope claims, under a banner
    # that says the claims are not authenticated.
    payload = envelope.get("payload")
    if not isinstance(payload, str):
        raise _Unreadable(f"{what}: envelope has no payload string")
    try:
        raw = base64.b64decode(payload, altchars=b"-_" if ("-" in payload or "_" in payload) else None)
    except (binascii.Error, ValueError) as e:
        raise _Unreadable(f"{what}: envelope payload is not base64: {e}") from e
    try:
        return _statement_report(_json(raw, f"{what}: envelope payload"), what)
    except RenderError as e:
        raise _Unreadable(str(e)) from e


def _schema_errors(report: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema_for(report))  # the schema of the report's own version
    errors = sorted(validator.iter_errors(report), key=lambda e: list(e.absolute_path))
    out = [f"{'/'.join(map(str, e.absolute_path)) or '(top level)'}: {e.message[:200]}" for e in errors]
    if len(out) > _MAX_SCHEMA_ERRORS:
        out = [*out[:_MAX_SCHEMA_ERRORS], f"and {len(out) - _MAX_SCHEMA_ERRORS} more"]
    return out


def _invalid(path: Path, reason: str, source_sha256: str) -> RenderInput:
    """An input that cannot be shown as a report: an empty page under the INVALID banner, with the reason."""
    return RenderInput(
        report={},
        signature=SignatureStatus(SignatureState.INVALID, reason),
        source=path.name,
        source_sha256=source_sha256,
    )


def load_input(path: str | os.PathLike[str], public_key: str | os.PathLike[str] | None = None) -> RenderInput:
    """Read an envelope or a plain report; with `public_key`, check the envelope's signature.

    A missing or unreadable key is a RenderError (a usage mistake), not an invalid signature. An input
    beyond the size or depth limits, or an envelope whose payload cannot be read, comes back as an
    INVALID input with an empty report, so the page that says "do not sign off" is still drawn.
    """
    path = Path(path)
    try:
        data = read_bounded(path)
    except TooLarge as e:
        # Hash by streaming, and only a regular file: a FIFO would never end.
        digest = sha256_file(path) if path.is_file() else ""
        return _invalid(path, f"{path.name} is {e} (at most {MAX_ENVELOPE_BYTES >> 20} MiB is read)", digest)
    except OSError as e:
        raise RenderError(f"{path}: cannot read: {e.strerror or e}") from e
    try:
        doc = _json(data, str(path))
    except _Unreadable as e:
        return _invalid(path, str(e), sha256_bytes(data))
    if not isinstance(doc, dict):
        raise RenderError(f"{path}: neither a DSSE envelope nor a report (top level is not an object)")

    subjects: list[Subject] = []
    if "payloadType" in doc and "payload" in doc:
        verified = None
        reason = None
        if public_key is not None:
            try:
                key = load_public_key(public_key)
            except SigningError as e:
                raise RenderError(str(e)) from e
            try:
                # The same bytes that were read above are verified and then rendered: no second read
                # of the file that could see different content.
                verified = dsse.verify(data, key)
            except SigningError as e:
                reason = str(e)
        if verified is not None:
            report = verified.predicate
            subjects = [Subject(s.name, s.digest.sha256) for s in verified.statement.subject]
            signature = SignatureStatus(SignatureState.VALID, verified.keyid)
        else:
            try:
                report, subjects = _unverified_payload(doc, str(path))
            except _Unreadable as e:
                return _invalid(path, reason or str(e), sha256_bytes(data))
            signature = (
                SignatureStatus(SignatureState.NOT_CHECKED)
                if reason is None
                else SignatureStatus(SignatureState.INVALID, reason)
            )
    elif doc.get("report_format") == REPORT_FORMAT:
        report, signature = doc, SignatureStatus(SignatureState.UNSIGNED)
    else:
        raise RenderError(f"{path}: neither a DSSE envelope nor a {REPORT_FORMAT} report")

    if report.get("report_format") != REPORT_FORMAT:
        problem = f"{path}: the signed statement does not carry a {REPORT_FORMAT} report"
        if signature.state in (SignatureState.INVALID, SignatureState.NOT_CHECKED):
            return _invalid(path, signature.detail or problem, sha256_bytes(data))
        raise RenderError(problem)
    return RenderInput(
        report=report,
        signature=signature,
        source=path.name,
        source_sha256=sha256_bytes(data),
        subjects=subjects,
        schema_errors=_schema_errors(report),
    )
