"""`qualify run` checks the report name, the signing key and the output folder before any gate runs, and
turns every OS error while writing into exit 4 with one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _hostile import assert_clean_error, qualify, snapshot

from qualify.cli import main
from qualify.report.write import check_report_name

GATE = "suite: hostile\nversion: 1\ngates:\n  - {id: g, kind: compare, value: 0.5, limit: 1.0, file: input.bin}\n"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "input.bin").write_bytes(b"x")
    (tmp_path / "g.yaml").write_text(GATE)
    return tmp_path


@pytest.fixture
def no_gate_may_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the run gets as far as starting pytest, i.e. running any gate."""

    def refuse(*args: object, **kwargs: object) -> int:
        raise AssertionError("the gates ran, but the run should have been refused before them")

    monkeypatch.setattr(pytest, "main", refuse)


def run(workdir: Path, *extra: str) -> int:
    return main(["run", str(workdir / "g.yaml"), "--out", str(workdir / "out"), *extra])


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "name", ["../x", "nodir/x", "/abs", ".hidden", "..", "a..b", "x y", "x\nINVALID", "-rf", "", "é", "a" * 200]
)
@pytest.mark.usefixtures("no_gate_may_run")
def test_a_report_name_that_is_not_a_plain_file_name_is_refused_first(
    workdir: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(workdir)
    assert run(workdir, f"--name={name}") == 2
    assert "is not a plain file name" in one_line(capsys)
    assert snapshot(workdir) == before  # no out/ folder, nothing next to it, nothing above it
    assert snapshot(workdir.parent / "x") is None


@pytest.mark.parametrize("name", ["r", "cartridge-default-20261201T092230Z", "a.b_c-d+e", "R1"])
def test_plain_names_pass(name: str) -> None:
    check_report_name(name)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("missing.pem", r"missing\.pem: private key file not found$"),
        ("keys/signing-key.pub.pem", "is a public key; signing needs the private key"),
        ("garbage.pem", r"garbage\.pem: not a PEM file"),
        ("keys", "cannot read private key"),
    ],
)
@pytest.mark.usefixtures("no_gate_may_run")
def test_strict_with_an_unusable_key_fails_before_any_gate(
    workdir: Path, key: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keygen", "--out", str(workdir / "keys")]) == 0
    (workdir / "garbage.pem").write_text("not a key\n")
    capsys.readouterr()
    before = snapshot(workdir)
    assert run(workdir, "--strict", "--sign-key", str(workdir / key), "--name", "r") == 2
    assert re.search(expected, one_line(capsys))
    assert snapshot(workdir) == before


@pytest.mark.usefixtures("no_gate_may_run")
def test_an_unusable_key_from_the_environment_fails_before_any_gate(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QUALIFY_SIGNING_KEY", str(workdir / "missing.pem"))
    assert run(workdir, "--strict") == 2
    assert one_line(capsys).endswith("missing.pem: private key file not found")


@pytest.mark.parametrize("out", ["a_file", "a_file/sub"])
@pytest.mark.usefixtures("no_gate_may_run")
def test_an_unwritable_out_folder_is_exit_4_before_any_gate(
    workdir: Path, out: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "a_file").write_text("keep me\n")
    before = snapshot(workdir)
    assert main(["run", str(workdir / "g.yaml"), "--out", str(workdir / out), "--name", "r"]) == 4
    assert "cannot write reports here" in one_line(capsys)
    assert snapshot(workdir) == before


@pytest.mark.usefixtures("no_gate_may_run")
def test_an_existing_report_name_is_refused_before_any_gate(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "out").mkdir()
    (workdir / "out" / "r.dsse.json").write_text("{}")
    before = snapshot(workdir)
    assert run(workdir, "--name", "r") == 4
    assert one_line(capsys).endswith("r.dsse.json: a report with this name exists already; choose another --name")
    assert snapshot(workdir) == before


def test_a_write_error_after_the_run_is_exit_4_with_one_line(workdir: Path) -> None:
    # A 1 KiB file-size limit lets the preflight's empty probe through and fails the report itself with
    # EFBIG: a real OS error at the very end of a run, the way a full disk would look.
    outcome = qualify(
        ["run", "g.yaml", "--out", "out", "--name", "r"], workdir, timeout=120, memory=2 << 30, max_write=1024
    )
    assert_clean_error(outcome, 4, r"^report not written: out/r\.json: cannot write report file: File too large$")
    assert snapshot(workdir / "out") == {}  # the half-written report was removed
