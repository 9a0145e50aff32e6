from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives import serialization

from qualify.errors import SigningError
from qualify.signing import REPORT_SUBJECT_NAME, Subject, sign_report, verify_envelope_file
from qualify.signing.keys import generate_keypair, load_private_key

REPORT = {"suite": "smoke", "items": [{"name": "ppl", "status": "pass", "observed": 7.25}], "signed": True}


@pytest.fixture
def signed(tmp_path, keypair):
    cartridge = tmp_path / "cartridge.safetensors"
    cartridge.write_bytes(b"kv prefix tensors")
    report_bytes, envelope_bytes = sign_report(REPORT, [Subject.for_file(cartridge)], load_private_key(keypair.private))
    report_path, envelope_path = tmp_path / "report.json", tmp_path / "report.dsse.json"
    report_path.write_bytes(report_bytes)
    envelope_path.write_bytes(envelope_bytes)
    return report_path, envelope_path, cartridge


def test_round_trip_through_files(signed, keypair):
    report_path, envelope_path, _ = signed
    verified = verify_envelope_file(envelope_path, keypair.public)
    assert verified.predicate == REPORT
    assert json.loads(report_path.read_bytes()) == REPORT
    assert [s.name for s in verified.statement.subject] == [REPORT_SUBJECT_NAME, "cartridge.safetensors"]


def test_subject_check_passes_for_the_signed_files(signed, keypair):
    report_path, envelope_path, cartridge = signed
    verify_envelope_file(envelope_path, keypair.public, subject_file=report_path)
    verify_envelope_file(envelope_path, keypair.public, subject_file=cartridge)


def test_subject_check_fails_for_another_file(signed, keypair, tmp_path):
    report_path, envelope_path, _ = signed
    edited = tmp_path / "edited.json"
    edited.write_bytes(report_path.read_bytes().replace(b'"pass"', b'"PASS"'))
    with pytest.raises(SigningError, match="is not a subject"):
        verify_envelope_file(envelope_path, keypair.public, subject_file=edited)
    with pytest.raises(SigningError, match="cannot read subject file"):
        verify_envelope_file(envelope_path, keypair.public, subject_file=tmp_path / "absent")


def test_verify_with_another_public_key_file_fails(signed, tmp_path):
    _, envelope_path, _ = signed
    other = generate_keypair(tmp_path / "other")
    with pytest.raises(SigningError, match="no signature for key id"):
        verify_envelope_file(envelope_path, other.public)


def test_tampered_envelope_file_names_the_file(signed, keypair):
    _, envelope_path, _ = signed
    envelope_path.write_bytes(envelope_path.read_bytes()[:-10])
    with pytest.raises(SigningError, match=f"{envelope_path.name}: envelope is not valid JSON"):
        verify_envelope_file(envelope_path, keypair.public)


def test_missing_envelope_file(keypair, tmp_path):
    with pytest.raises(SigningError, match="envelope file not found"):
        verify_envelope_file(tmp_path / "none.dsse.json", keypair.public)


def test_verifying_with_the_private_key_file_is_refused(signed, keypair):
    _, envelope_path, _ = signed
    with pytest.raises(SigningError, match="is a private key"):
        verify_envelope_file(envelope_path, keypair.private)


def test_report_name_becomes_the_report_subject(private_key):
    report_bytes, envelope_bytes = sign_report(REPORT, [], private_key, report_name="smoke-1.json")
    payload = json.loads(base64.b64decode(json.loads(envelope_bytes)["payload"]))
    assert payload["subject"] == [Subject.for_bytes("smoke-1.json", report_bytes).model_dump()]


def test_private_key_never_appears_in_the_outputs(signed, keypair):
    report_path, envelope_path, _ = signed
    pem = keypair.private.read_text()
    raw = load_private_key(keypair.private).private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    envelope = envelope_path.read_bytes()
    payload = base64.b64decode(json.loads(envelope)["payload"])
    secrets = [
        "".join(pem.splitlines()[1:-1]).encode(),  # the PEM body
        raw,
        raw.hex().encode(),
        base64.b64encode(raw).rstrip(b"="),
    ]
    for blob in (report_path.read_bytes(), envelope, payload):
        for secret in secrets:
            assert secret not in blob
