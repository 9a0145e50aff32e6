"""Report names (`<run name>-<UTC time>`, never a cut-off join of suites) and `verify`'s short answer."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from qualify.cli import main


def _gate(folder: Path, suite: str, name: str = "g.yaml") -> Path:
    path = folder / name
    path.write_text(
        textwrap.dedent(
            f"""\
            suite: {suite}
            version: 1
            gates:
              - id: bound
                kind: compare
                requires: [cpu]
                limit: 1.0
                value: 0.5
            """
        )
    )
    return path


@pytest.mark.parametrize(
    ("suites", "stem"),
    [
        (["cartridge-loss"], "cartridge-loss"),
        (["cartridge-loss", "cartridge-kernel-numerics-with-a-very-long-name"], "qualify"),
        (["../odd name!"], "odd-name"),
    ],
)
def test_default_report_name_is_run_name_and_utc_time(tmp_path: Path, suites: list[str], stem: str) -> None:
    gates = [_gate(tmp_path, s, f"g{i}.yaml") for i, s in enumerate(suites)]
    assert main(["run", *map(str, gates), "--out", str(tmp_path / "out")]) == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(names) == 1
    assert re.fullmatch(rf"{re.escape(stem)}-\d{{8}}T\d{{6}}Z\.json", names[0]), names


def test_verify_prints_the_verdict_and_a_count_and_lists_subjects_only_with_v(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keygen", "--out", str(tmp_path / "k")]) == 0
    gate = _gate(tmp_path, "s")
    key = str(tmp_path / "k" / "signing-key.pem")
    assert main(["run", str(gate), "--out", str(tmp_path / "o"), "--name", "r", "--sign-key", key]) == 0
    capsys.readouterr()
    envelope, pub = str(tmp_path / "o" / "r.dsse.json"), str(tmp_path / "k" / "signing-key.pub.pem")
    assert main(["verify", envelope, "--key", pub]) == 0
    short = capsys.readouterr().out.splitlines()
    assert len(short) == 2 and short[0].startswith("OK: ")
    assert re.fullmatch(r"verdict: PASS  release: \w+  subjects: 2 \(-v lists them\)", short[1]), short
    assert main(["verify", envelope, "--key", pub, "-v"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in listed[2:]] == ["r.json", "gate-file:g.yaml"]


def test_report_paths_are_relative_to_the_repository_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    repo = tmp_path / "checkout"
    (repo / ".git").mkdir(parents=True)
    (repo / "gates").mkdir()
    gate = _gate(repo / "gates", "s")
    text = gate.read_text().replace("value: 0.5", "value: 0.5\n    file: ../data/input.bin")
    gate.write_text(text)
    (repo / "data").mkdir()
    (repo / "data" / "input.bin").write_bytes(b"qualified")
    monkeypatch.chdir(repo / "gates")  # any folder inside the checkout finds the same root
    assert main(["run", str(gate), "--out", str(tmp_path / "out"), "--name", "r"]) == 0
    report = json.loads((tmp_path / "out" / "r.json").read_text())
    assert [g["path"] for g in report["gate_files"]] == ["gates/g.yaml"]
    assert report["items"][0]["gate_file"] == "gates/g.yaml"
    assert report["items"][0]["inputs"][0]["path"] == "data/input.bin"
    assert sorted(i["path"] for i in report["inputs"]) == ["data/input.bin", "gates/g.yaml"]
    assert str(tmp_path) not in json.dumps({k: v for k, v in report.items() if k != "provenance"})
