"""What the renderer reads and how it judges the signature: valid, tampered, wrong key, unchecked, unsigned."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from _render_signed import Signed

from qualify.render.html import render_html
from qualify.render.markdown import render_markdown
from qualify.render.source import RenderError, SignatureState, load_input
from qualify.signing.keys import key_id, load_public_key


def _tampered(signed: Signed, tmp_path: Path) -> Path:
    envelope = json.loads(signed.envelope.read_text())
    payload = base64.b64decode(envelope["payload"]).replace(b'"verdict":"FAIL"', b'"verdict":"PASS"', 1)
    assert b'"verdict":"PASS"' in payload
    envelope["payload"] = base64.b64encode(payload).decode()
    path = tmp_path / "tampered.dsse.json"
    path.write_text(json.dumps(envelope))
    return path


def test_valid_signature_names_the_key(signed: Signed) -> None:
    src = load_input(signed.envelope, signed.public_key)
    assert src.signature.state is SignatureState.VALID
    assert src.signature.detail == key_id(load_public_key(signed.public_key))
    assert src.signature.label.startswith("signature: valid (key id ")
    assert src.report == signed.report
    assert src.schema_errors == []
    assert src.subjects and src.subjects[0].name == "qualification-report.json"


def test_tampered_payload_is_invalid_and_says_so_first(signed: Signed, tmp_path: Path) -> None:
    src = load_input(_tampered(signed, tmp_path), signed.public_key)
    assert src.signature.state is SignatureState.INVALID
    assert "does not verify" in src.signature.detail
    page = render_html(src)
    assert page.index("signature: INVALID") < page.index("id='gates'")
    assert "Do not sign off" in page
    # The forged PASS disagrees with the items, which the page points out as well.
    assert "but its items imply FAIL" in page
    assert render_markdown(src).splitlines()[0].count("INVALID") == 1


def test_wrong_key_is_invalid(signed: Signed) -> None:
    src = load_input(signed.envelope, signed.other_public_key)
    assert src.signature.state is SignatureState.INVALID
    assert "wrong public key" in src.signature.detail


def test_without_a_key_the_signature_is_not_checked(signed: Signed) -> None:
    src = load_input(signed.envelope)
    assert src.signature.state is SignatureState.NOT_CHECKED
    assert src.signature.label == "signature: not checked (no key given)"
    assert src.report["verdict"] == "FAIL"


def test_a_plain_report_is_unsigned(signed: Signed) -> None:
    src = load_input(signed.report_path, signed.public_key)
    assert src.signature.state is SignatureState.UNSIGNED
    assert "UNSIGNED" in render_html(src) and "UNSIGNED" in render_markdown(src).splitlines()[0]


def test_schema_violations_are_reported_not_fatal(signed: Signed, tmp_path: Path) -> None:
    broken = {**signed.report, "counts": "many"}
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    src = load_input(path)
    assert any(e.startswith("counts:") for e in src.schema_errors)
    assert "does not match its schema" in render_html(src)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json", "not valid JSON"),
        (b"[1, 2]", "neither a DSSE envelope nor a report"),
        (b'{"hello": "world"}', "neither a DSSE envelope nor a cartridge-qualify/report report"),
    ],
)
def test_inputs_that_are_not_reports_are_refused(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "input.json"
    path.write_bytes(content)
    with pytest.raises(RenderError, match=message):
        load_input(path)


@pytest.mark.parametrize(
    ("payload", "message"),
    [("bm90IGpzb24=", "envelope payload is not valid JSON"), ("not base64!", "envelope payload is not base64")],
)
def test_an_envelope_with_an_unreadable_payload_is_invalid_not_refused(
    tmp_path: Path, payload: str, message: str
) -> None:
    # An envelope that cannot be read is an invalid envelope: its page says "do not sign off".
    path = tmp_path / "input.dsse.json"
    path.write_text(json.dumps({"payloadType": "x", "payload": payload, "signatures": []}))
    src = load_input(path)
    assert src.signature.state is SignatureState.INVALID
    assert message in src.signature.detail
    assert "INVALID" in render_html(src) and "INVALID" in render_markdown(src).splitlines()[0]


def test_a_missing_key_is_a_usage_error_not_an_invalid_signature(signed: Signed, tmp_path: Path) -> None:
    with pytest.raises(RenderError, match="not found"):
        load_input(signed.envelope, tmp_path / "absent.pub.pem")
