"""Hostile gate files: each is refused quickly, with one `file:line:col: message`, exit 2, nothing written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _hostile import QUICK_S, assert_clean_error, qualify, snapshot

from qualify.schema.yaml_source import MAX_DEPTH, MAX_GATE_FILE_BYTES, MAX_NODES

HEADER = "suite: hostile\nversion: 1\n"


def billion_laughs() -> str:
    """The classic: nine levels of nine aliases, 9**9 strings from about 640 bytes."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


CASES = {
    # name: (file text, expected first line after "FILE:")
    "billion_laughs": (HEADER + billion_laughs(), r":4:8: YAML aliases \('\*a'\) are not allowed"),
    "self_alias": (HEADER + "gates: &g [*g]\n", r":3:12: YAML aliases \('\*g'\) are not allowed"),
    "alias_in_merge": (HEADER + "base: &b {a: 1}\nother:\n  <<: *b\n", r":5:3: YAML merge keys"),
    "deep_flow": (
        HEADER + "gates: " + "[" * 100_000 + "]" * 100_000 + "\n",
        rf":3:\d+: gate file nests deeper than {MAX_DEPTH} levels",
    ),
    "deep_block": (
        HEADER + "".join("  " * i + f"k{i}:\n" for i in range(500)),
        rf":{MAX_DEPTH + 2}:\d+: gate file nests deeper than {MAX_DEPTH} levels",
    ),
    "many_nodes": (
        HEADER + "gates: [" + ",".join(["0"] * (MAX_NODES + 10)) + "]\n",
        rf":3:\d+: gate file has more than {MAX_NODES} YAML nodes",
    ),
    "huge_integer": (HEADER + "gates: " + "9" * 5000 + "\n", r":3:8: invalid int value"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_yaml_is_refused_by_lint(tmp_path: Path, name: str) -> None:
    text, expected = CASES[name]
    gate = tmp_path / f"{name}.yaml"
    gate.write_text(text)
    assert len(text.encode()) <= MAX_GATE_FILE_BYTES  # each case trips its own limit, not the size limit
    before = snapshot(tmp_path)
    outcome = qualify(["lint", gate.name], tmp_path)
    assert_clean_error(outcome, 2, "^" + re.escape(gate.name) + expected)
    assert outcome.seconds < QUICK_S
    assert snapshot(tmp_path) == before


def test_a_50_mb_gate_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    gate = tmp_path / "huge.yaml"
    with gate.open("wb") as f:
        f.write(HEADER.encode())
        f.truncate(50 << 20)  # sparse: the test itself stays cheap
    outcome = qualify(["lint", gate.name], tmp_path)
    assert_clean_error(outcome, 2, r"^huge\.yaml:1:1: gate file is larger than the 1 MiB limit$")
    assert outcome.seconds < QUICK_S


def test_list_refuses_the_same_way(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text(HEADER + billion_laughs())
    assert_clean_error(qualify(["list", "g.yaml"], tmp_path), 2, r"^g\.yaml:4:8: YAML aliases")


def test_run_refuses_a_bomb_before_any_item_runs(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text(
        HEADER + "gates:\n  - {id: a, kind: compare, value: 1.0, limit: 2.0}\n" + billion_laughs()
    )
    # The run imports torch for provenance when it writes the FAIL report: more memory and time than lint.
    outcome = qualify(["run", "g.yaml", "--out", "out", "--name", "r"], tmp_path, timeout=120, memory=2 << 30)
    assert "Traceback" not in outcome.output
    assert outcome.code == 2, outcome.output[-3000:]
    assert "g.yaml:6:8: YAML aliases ('*a') are not allowed in a gate file" in outcome.stdout
    # An invalid gate file is a FAIL on record, and not one item ran.
    report = json.loads((tmp_path / "out" / "r.json").read_text())
    assert (report["verdict"], report["items"]) == ("FAIL", [])
