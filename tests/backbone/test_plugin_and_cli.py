"""End to end through pytest and the CLI, with the test-only `compare` kind (no model needed)."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path

import jsonschema
import pytest

from qualify.cli import main
from qualify.report.schema import SCHEMA_PATH


def gate_file(tmp_path: Path, value: float, requires: str = "[cpu]", name: str = "gates.yaml") -> Path:
    (tmp_path / "input.bin").write_bytes(b"qualified bytes")
    p = tmp_path / name
    p.write_text(
        textwrap.dedent(
            f"""
            suite: backbone-test
            version: 1
            gates:
              - id: bound
                kind: compare
                requires: {requires}
                limit: 1.0
                file: input.bin
                matrix:
                  value: [{value}, 0.25]
            """
        ).lstrip()
    )
    return p


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    assert main(["keygen", "--out", str(tmp_path / "keys")]) == 0
    return tmp_path / "keys" / "signing-key.pem", tmp_path / "keys" / "signing-key.pub.pem"


def run(tmp_path: Path, gates: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    code = main(["run", str(gates), "--out", str(out), "--name", "r", *extra])
    return code, out


def load(out: Path) -> dict:
    return json.loads((out / "r.json").read_text())


def test_passing_run_is_pass_signed_and_verifies(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    priv, pub = keys
    code, out = run(tmp_path, gate_file(tmp_path, 0.5), "--sign-key", str(priv))
    assert code == 0
    report = load(out)
    assert report["verdict"] == "PASS"
    assert [i["name"] for i in report["items"]] == ["bound[0.5]", "bound[0.25]"]
    assert {i["status"] for i in report["items"]} == {"passed"}
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
    assert any(i["role"] == "test-input" for i in report["inputs"])
    assert main(["verify", str(out / "r.dsse.json"), "--key", str(pub), "--subject", str(out / "r.json")]) == 0
    assert main(["verify", str(out / "r.dsse.json"), "--key", str(pub), "--subject", str(tmp_path / "input.bin")]) == 0
    assert priv.read_text() not in (out / "r.dsse.json").read_text() + (out / "r.json").read_text()


def test_tampered_payload_or_other_key_fails_verification(
    tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    priv, pub = keys
    _, out = run(tmp_path, gate_file(tmp_path, 0.5), "--sign-key", str(priv))
    envelope = json.loads((out / "r.dsse.json").read_text())
    payload = base64.b64decode(envelope["payload"]).replace(b'"PASS"', b'"PASs"', 1)
    envelope["payload"] = base64.b64encode(payload).decode()
    tampered = tmp_path / "tampered.dsse.json"
    tampered.write_text(json.dumps(envelope))
    assert main(["verify", str(tampered), "--key", str(pub)]) == 1
    assert "INVALID" in capsys.readouterr().err
    assert main(["keygen", "--out", str(tmp_path / "other")]) == 0
    assert main(["verify", str(out / "r.dsse.json"), "--key", str(tmp_path / "other" / "signing-key.pub.pem")]) == 1
    # A file that was not qualified is not a subject.
    (tmp_path / "stranger.bin").write_bytes(b"other bytes")
    assert (
        main(["verify", str(out / "r.dsse.json"), "--key", str(pub), "--subject", str(tmp_path / "stranger.bin")]) == 1
    )


def test_failure_is_fail_with_a_hypothesis_style_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(tmp_path, gate_file(tmp_path, 1.5))
    assert code == 1
    report = load(out)
    assert report["verdict"] == "FAIL" and report["signed"] is False
    failed = next(i for i in report["items"] if i["status"] == "failed")
    assert failed["checks"][0]["observed"] == 1.5 and failed["checks"][0]["threshold"] == 1.0
    text = capsys.readouterr().out
    assert "gate bound[1.5]: 1 of 1 check(s) did not pass" in text
    assert "protects: a test value stays within its limit" in text
    assert "<= 1" in text and "VERDICT: FAIL" in text
    assert "UNSIGNED" in text
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))


def test_a_skipped_item_makes_the_verdict_incomplete_never_pass(
    tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    priv, _ = keys
    gates = gate_file(tmp_path, 0.5, requires="[sm90]")
    code, out = run(tmp_path, gates, "--sign-key", str(priv))
    assert code == 0  # without --strict INCOMPLETE is printed, not an exit code
    report = load(out)
    assert report["verdict"] == "INCOMPLETE"
    assert {i["status"] for i in report["items"]} == {"skipped"}
    assert all("requires sm90" in i["reason"] for i in report["items"])
    captured = capsys.readouterr()
    assert "VERDICT: INCOMPLETE" in captured.out and "NOT a pass" in captured.err
    assert report["release"]["is_release"] is False
    code, out2 = run(tmp_path / "strict", gates, "--sign-key", str(priv), "--strict")
    assert code == 3
    strict_report = load(out2)
    assert strict_report["verdict"] == "INCOMPLETE" and strict_report["release"]["is_release"] is True


def test_strict_refuses_to_run_without_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUALIFY_SIGNING_KEY", raising=False)
    code, out = run(tmp_path, gate_file(tmp_path, 0.5), "--strict")
    assert code == 2 and not out.exists()


def test_reports_are_never_overwritten(tmp_path: Path) -> None:
    gates = gate_file(tmp_path, 0.5)
    assert run(tmp_path, gates)[0] == 0
    before = (tmp_path / "out" / "r.json").read_bytes()
    assert run(tmp_path, gates)[0] == 4
    assert (tmp_path / "out" / "r.json").read_bytes() == before


def test_k_selects_items_and_deselected_items_are_reported_not_passed(tmp_path: Path) -> None:
    code, out = run(tmp_path, gate_file(tmp_path, 1.5), "-k", "0.25")
    assert code == 0  # INCOMPLETE without --strict
    report = load(out)
    by_name = {i["name"]: i for i in report["items"]}
    assert by_name["bound[0.25]"]["status"] == "passed"
    assert by_name["bound[1.5]"]["status"] == "deselected"
    assert by_name["bound[1.5]"]["reason"] == "deselected by -k 0.25"
    assert report["verdict"] == "INCOMPLETE"
    assert report["counts"]["deselected"] == 1 and report["counts"]["total"] == 2
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))


def test_lint_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = gate_file(tmp_path, 0.5)
    assert main(["lint", str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("limit:", "limitt:"))
    assert main(["lint", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:7:5: gate 'bound': unknown key 'limitt' (did you mean 'limit'?)" in err
    assert err.count("unknown key 'limitt'") == 1  # once for the gate, not once per matrix cell
    evil = tmp_path / "evil.yaml"
    evil.write_text("suite: s\nversion: 1\ngates: !!python/object/apply:os.getcwd []\n")
    assert main(["lint", str(evil)]) == 2
    assert "not allowed" in capsys.readouterr().err


def test_list_shows_requirements_and_whether_the_host_can_run_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list", str(gate_file(tmp_path, 0.5, requires="[cpu, flashinfer]"))]) == 0
    out = capsys.readouterr().out
    assert "bound[0.5]" in out and "cpu,flashinfer" in out


def test_plain_pytest_collects_gate_files(pytester: pytest.Pytester, tmp_path: Path) -> None:
    gates = gate_file(tmp_path, 1.5)
    result = pytester.runpytest_inprocess(str(gates), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*VERDICT: FAIL*"])
