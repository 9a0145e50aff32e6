from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from qualify.errors import SigningError
from qualify.signing import dsse
from qualify.signing.intoto import Subject, build_statement
from qualify.signing.keys import key_id

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _statement() -> bytes:
    return build_statement([Subject.for_bytes("cartridge.pt", b"kv")], {"verdict": "pass", "ppl": 7.25})


def _envelope(private_key: Ed25519PrivateKey, payload: bytes | None = None) -> bytes:
    return dsse.sign(_statement() if payload is None else payload, private_key).to_json()


def _edit(envelope: bytes, **changes) -> bytes:
    doc = json.loads(envelope)
    doc.update(changes)
    return json.dumps(doc).encode()


def test_pae_matches_the_dsse_spec_example():
    # protocol.md: PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body
    assert (
        dsse._pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert dsse._pae("", b"") == b"DSSEv1 0  0 "


def test_signature_is_over_the_spec_pae_of_the_payload(private_key):
    # Checked with the bare public key against PAE bytes written out by hand, not with our verifier.
    envelope = json.loads(_envelope(private_key, b"hello world"))
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert base64.b64decode(envelope["payload"]) == b"hello world"
    (signature,) = envelope["signatures"]
    assert signature["keyid"] == key_id(private_key.public_key())
    private_key.public_key().verify(
        base64.b64decode(signature["sig"]), b"DSSEv1 28 application/vnd.in-toto+json 11 hello world"
    )


def test_round_trip_returns_the_exact_signed_bytes(private_key):
    verified = dsse.verify(_envelope(private_key), private_key.public_key())
    assert verified.payload == _statement()
    assert verified.predicate == {"verdict": "pass", "ppl": 7.25}
    assert verified.statement.subject[0].name == "cartridge.pt"
    assert verified.keyid == key_id(private_key.public_key())


def test_one_changed_character_in_the_decoded_payload_fails(private_key):
    envelope = _envelope(private_key)
    payload = base64.b64decode(json.loads(envelope)["payload"])
    forged = payload.replace(b'"pass"', b'"fass"')
    assert forged != payload and len(forged) == len(payload)
    tampered = _edit(envelope, payload=base64.b64encode(forged).decode())
    with pytest.raises(SigningError, match="does not verify"):
        dsse.verify(tampered, private_key.public_key())


def test_every_single_character_change_in_the_base64_payload_fails(private_key):
    envelope = _envelope(private_key)
    text = json.loads(envelope)["payload"]
    for i, c in enumerate(text):
        replacement = _B64[(_B64.index(c) + 1) % 64] if c in _B64 else "A"
        tampered = _edit(envelope, payload=text[:i] + replacement + text[i + 1 :])
        with pytest.raises(SigningError):
            dsse.verify(tampered, private_key.public_key())


def test_every_single_byte_change_in_the_envelope_fails(private_key):
    envelope = _envelope(private_key)
    for i, byte in enumerate(envelope):
        c = chr(byte)
        replacement = _B64[(_B64.index(c) + 1) % 64] if c in _B64 else "x"
        tampered = envelope[:i] + replacement.encode() + envelope[i + 1 :]
        with pytest.raises(SigningError):
            dsse.verify(tampered, private_key.public_key())


def test_padding_bit_changes_in_base64_are_refused(private_key):
    # b"hi" is "aGk="; "aGl=" decodes to the same bytes, but is not the text that was signed.
    envelope = _envelope(private_key, b"hi")
    assert json.loads(envelope)["payload"] == "aGk="
    with pytest.raises(SigningError, match="not canonically encoded"):
        dsse.verify(_edit(envelope, payload="aGl="), private_key.public_key())


def test_another_public_key_fails(private_key):
    other = Ed25519PrivateKey.generate().public_key()
    with pytest.raises(SigningError, match="no signature for key id") as info:
        dsse.verify(_envelope(private_key), other)
    assert key_id(private_key.public_key()) in str(info.value)


def test_another_key_with_a_forged_key_id_fails(private_key):
    other = Ed25519PrivateKey.generate().public_key()
    envelope = json.loads(_envelope(private_key))
    envelope["signatures"][0]["keyid"] = key_id(other)
    with pytest.raises(SigningError, match="does not verify"):
        dsse.verify(json.dumps(envelope).encode(), other)


def test_tampered_signature_fails(private_key):
    envelope = json.loads(_envelope(private_key))
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[10] ^= 0x01
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    with pytest.raises(SigningError, match="does not verify"):
        dsse.verify(json.dumps(envelope).encode(), private_key.public_key())


def test_signature_that_is_not_base64_fails(private_key):
    envelope = json.loads(_envelope(private_key))
    envelope["signatures"][0]["sig"] = "not base64!"
    with pytest.raises(SigningError, match="signature is not valid base64"):
        dsse.verify(json.dumps(envelope).encode(), private_key.public_key())


def test_payload_that_is_not_base64_fails(private_key):
    with pytest.raises(SigningError, match="payload is not valid base64"):
        dsse.verify(_edit(_envelope(private_key), payload="%%%"), private_key.public_key())


def test_wrong_payload_type_fails(private_key):
    tampered = _edit(_envelope(private_key), payloadType="application/json")
    with pytest.raises(SigningError, match="wrong payloadType 'application/json'"):
        dsse.verify(tampered, private_key.public_key())


def test_a_second_signature_by_another_key_does_not_matter(private_key):
    other = Ed25519PrivateKey.generate()
    mine = json.loads(_envelope(private_key))
    theirs = json.loads(_envelope(other))
    mine["signatures"] = theirs["signatures"] + mine["signatures"]
    assert dsse.verify(json.dumps(mine).encode(), private_key.public_key()).payload == _statement()
    assert dsse.verify(json.dumps(mine).encode(), other.public_key()).payload == _statement()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not valid JSON"),
        (b'{"payload": "eyJ', "not valid JSON"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8"),
        (b"[]", "malformed DSSE envelope"),
        (b'{"payload": "", "payloadType": "application/vnd.in-toto+json", "signatures": []}', "signatures"),
        (b'{"payload": 1, "payloadType": "application/vnd.in-toto+json", "signatures": []}', "payload"),
    ],
)
def test_truncated_or_garbage_envelope_fails_with_a_reason(private_key, data, reason):
    with pytest.raises(SigningError, match=reason):
        dsse.verify(data, private_key.public_key())


def test_truncated_real_envelope_fails(private_key):
    envelope = _envelope(private_key)
    with pytest.raises(SigningError, match="truncated"):
        dsse.verify(envelope[: len(envelope) // 2], private_key.public_key())


def test_unknown_envelope_field_fails(private_key):
    with pytest.raises(SigningError, match="malformed DSSE envelope: extra"):
        dsse.verify(_edit(_envelope(private_key), extra="x"), private_key.public_key())


def test_duplicate_keys_are_refused(private_key):
    envelope = _envelope(private_key)
    duplicated = envelope.replace(b'{"payload":', b'{"payload":"e30=","payload":', 1)
    with pytest.raises(SigningError, match="duplicate key 'payload'"):
        dsse.verify(duplicated, private_key.public_key())


def test_signed_payload_that_is_not_a_statement_fails(private_key):
    with pytest.raises(SigningError, match="payload is not a valid in-toto Statement: not valid JSON"):
        dsse.verify(_envelope(private_key, b"hello world"), private_key.public_key())
    with pytest.raises(SigningError, match=r"payload is not a valid in-toto Statement: .*subject"):
        dsse.verify(_envelope(private_key, b'{"_type": "https://in-toto.io/Statement/v1"}'), private_key.public_key())


def test_url_safe_base64_is_accepted(private_key):
    # DSSE allows either alphabet; another producer may use the URL-safe one.
    envelope = json.loads(_envelope(private_key))
    payload = base64.b64decode(envelope["payload"])
    envelope["payload"] = base64.urlsafe_b64encode(payload).decode()
    assert dsse.verify(json.dumps(envelope).encode(), private_key.public_key()).payload == payload
