"""Hostile envelopes: `verify` says `INVALID: ...` on one line and exits 1; `render` draws the page that says
"do not sign off" and exits 1. Quickly, in bounded memory, without a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _hostile import QUICK_S, assert_clean_error, qualify, snapshot
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from qualify.cli import main
from qualify.json_limits import MAX_ENVELOPE_BYTES, MAX_JSON_DEPTH
from qualify.signing import dsse
from qualify.signing.keys import load_private_key

DEEP = b"[" * 100_000 + b"]" * 100_000
# An unterminated string of escaped quotes: a depth check that rescans from every quote is quadratic here
# (26 s for 60 KB); 600 KB must still be refused at once.
UNTERMINATED = b'"' + b'\\"' * 300_000


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("keys")
    assert main(["keygen", "--out", str(folder)]) == 0
    return folder / "signing-key.pem", folder / "signing-key.pub.pem"


def signed(payload: bytes, key: Ed25519PrivateKey) -> bytes:
    """A correctly signed envelope around arbitrary payload bytes: the signature is not what is hostile."""
    return dsse.sign(payload, key).to_json()


def envelopes(private: Path) -> dict[str, tuple[bytes, str]]:
    """name: (envelope bytes, regex the reason must match)."""
    key = load_private_key(private)
    good = json.loads(signed(b'{"a": 1}', key))
    return {
        "non_base64_payload": (
            json.dumps({**good, "payload": "not base64 at all!"}).encode(),
            "envelope payload is not valid base64",
        ),
        "deep_json": (DEEP, f"envelope is nested deeper than {MAX_JSON_DEPTH} levels"),
        "deep_json_in_object": (
            b'{"payloadType": "x", "payload": "", "signatures": ' + DEEP + b"}",
            f"nested deeper than {MAX_JSON_DEPTH} levels",
        ),
        # Signed by the right key, so the parser reaches the payload, which nests 100,000 deep.
        "deep_signed_payload": (signed(DEEP, key), f"nested deeper than {MAX_JSON_DEPTH} levels"),
        "unterminated_string": (UNTERMINATED, "not valid JSON: Unterminated string"),
        "unterminated_signed_payload": (signed(UNTERMINATED, key), "not valid JSON: Unterminated string"),
    }


CASES = [
    "non_base64_payload",
    "deep_json",
    "deep_json_in_object",
    "deep_signed_payload",
    "unterminated_string",
    "unterminated_signed_payload",
]


@pytest.mark.parametrize("name", CASES)
def test_verify_says_invalid_on_one_line(tmp_path: Path, keys: tuple[Path, Path], name: str) -> None:
    data, reason = envelopes(keys[0])[name]
    (tmp_path / "e.dsse.json").write_bytes(data)
    before = snapshot(tmp_path)
    outcome = qualify(["verify", "e.dsse.json", "--key", str(keys[1])], tmp_path)
    assert_clean_error(outcome, 1, rf"^INVALID: e\.dsse\.json: .*{reason}")
    assert outcome.seconds < QUICK_S
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("with_key", [True, False])
@pytest.mark.parametrize("name", [c for c in CASES if c != "unterminated_string"])  # not JSON: render's exit 2
def test_render_draws_the_do_not_sign_off_page(
    tmp_path: Path, keys: tuple[Path, Path], name: str, with_key: bool
) -> None:
    data, _ = envelopes(keys[0])[name]
    (tmp_path / "e.dsse.json").write_bytes(data)
    key = ["--key", str(keys[1])] if with_key else []
    outcome = qualify(["render", "e.dsse.json", "-o", "page.html", *key], tmp_path)
    line = assert_clean_error(outcome, 1, r"^page\.html: .*; signature: INVALID: ")
    assert outcome.seconds < QUICK_S
    page = (tmp_path / "page.html").read_text()
    assert "Do not sign off on this report." in page
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.dsse.json", "page.html"], line


def test_a_huge_envelope_is_not_read(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    with (tmp_path / "e.dsse.json").open("wb") as f:
        f.write(b'{"payloadType": "application/vnd.in-toto+json", "payload": "')
        f.truncate(MAX_ENVELOPE_BYTES + (8 << 20))  # sparse
    outcome = qualify(["verify", "e.dsse.json", "--key", str(keys[1])], tmp_path)
    assert_clean_error(outcome, 1, r"^INVALID: e\.dsse\.json: envelope file is larger than the 32 MiB limit$")
    outcome = qualify(["render", "e.dsse.json", "--format", "md"], tmp_path)
    assert outcome.code == 1 and "Traceback" not in outcome.output
    assert "do not sign off" in outcome.stdout and "larger than the 32 MiB limit" in outcome.stdout
    assert outcome.seconds < QUICK_S


def test_an_envelope_at_the_depth_limit_still_verifies(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    # The limits leave real envelopes alone (a real report nests 11 levels); exactly at the limit passes.
    deep: object = 1
    for _ in range(MAX_JSON_DEPTH - 2):  # statement object, predicate object, then lists
        deep = [deep]
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "r.json", "digest": {"sha256": "0" * 64}}],
        "predicateType": "https://cartridge-qualify.dev/qualification-report/v1",
        "predicate": {"deep": deep},
    }
    (tmp_path / "e.dsse.json").write_bytes(signed(json.dumps(statement).encode(), load_private_key(keys[0])))
    outcome = qualify(["verify", "e.dsse.json", "--key", str(keys[1])], tmp_path)
    assert outcome.code == 0, outcome.output
    assert outcome.stdout.startswith("OK: e.dsse.json is signed by")
