"""A run vouches only for kernel variants it qualified: one dispatched by a perf or engine item but qualified by
no passing numerics item makes the verdict INCOMPLETE (a failing exit under --strict), named in the report, the
console and the page."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from qualify.cli import main
from qualify.render.html import render_html
from qualify.render.source import load_input
from qualify.render.view import coverage_rows, unqualified_specializations

PACKED = "decode/bfloat16/g4/d128/p8/causal/cv-float8_e4m3fn/lv-bfloat16/m16n128r2w4s3"
PLAIN = "decode/bfloat16/g4/d128/p8/causal/cv-float8_e4m3fn/lv-bfloat16/m16n128r1w4s3"


def _gate(tmp_path: Path, qualified: list[str], dispatched: list[str], numerics_value: float = 0.5) -> Path:
    path = tmp_path / "g.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            suite: s
            version: 1
            gates:
              - {{id: numerics, kind: compare, requires: [cpu], limit: 1.0, value: {numerics_value},
                  qualifies: {json.dumps(qualified)}}}
              - {{id: perf, kind: compare, requires: [cpu], limit: 1.0, value: 0.5,
                  dispatches: {json.dumps(dispatched)}}}
            """
        )
    )
    return path


def _run(tmp_path: Path, gate: Path, *extra: str) -> tuple[int, dict]:
    code = main(["run", str(gate), "--out", str(tmp_path / "out"), "--name", "r", *extra])
    return code, json.loads((tmp_path / "out" / "r.json").read_text())


def test_a_dispatched_variant_no_item_qualified_makes_the_run_incomplete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _run(tmp_path, _gate(tmp_path, [PLAIN], [PLAIN, PACKED]))
    assert code == 0 and report["verdict"] == "INCOMPLETE"  # every item passed, yet not a PASS
    assert report["coverage"]["unqualified"] == [PACKED]
    rows = {r["specialization"]: r for r in report["coverage"]["rows"]}
    assert rows[PLAIN] == {"specialization": PLAIN, "qualified_by": ["numerics"], "dispatched_by": ["perf"]}
    assert rows[PACKED]["qualified_by"] == []
    out = capsys.readouterr().out
    assert f"qualified by no passing numerics item: {PACKED}" in out
    assert "1 dispatched specialization unqualified: not everything was shown" in out


def test_strict_fails_on_it_and_qualifying_the_variant_makes_it_a_pass(tmp_path: Path) -> None:
    assert main(["keygen", "--out", str(tmp_path / "k")]) == 0
    key = ["--strict", "--sign-key", str(tmp_path / "k" / "signing-key.pem")]
    gate = _gate(tmp_path, [PLAIN], [PACKED])
    assert main(["run", str(gate), "--out", str(tmp_path / "a"), "--name", "r", *key]) == 3
    gate = _gate(tmp_path, [PLAIN, PACKED], [PACKED])
    assert main(["run", str(gate), "--out", str(tmp_path / "b"), "--name", "r", *key]) == 0
    assert json.loads((tmp_path / "b" / "r.json").read_text())["coverage"]["unqualified"] == []


def test_a_failing_numerics_item_qualifies_nothing(tmp_path: Path) -> None:
    code, report = _run(tmp_path, _gate(tmp_path, [PACKED], [PACKED], numerics_value=2.0))
    assert code == 1 and report["verdict"] == "FAIL"
    assert report["coverage"]["unqualified"] == [PACKED]


def test_the_page_shows_the_table_and_recomputes_it_from_the_items(tmp_path: Path) -> None:
    _, report = _run(tmp_path, _gate(tmp_path, [PLAIN], [PACKED]))
    assert unqualified_specializations(report) == [PACKED]
    assert [r[0] for r in coverage_rows(report)] == sorted([PLAIN, PACKED])
    html = render_html(load_input(tmp_path / "out" / "r.json"))
    assert "Kernel specialization coverage" in html and PACKED in html
    assert "qualified by no passing numerics item" in html
    # A report whose own coverage block hides the gap is still caught: the page reads the items.
    report["coverage"] = {"rows": [], "unqualified": []}
    report["verdict"] = "PASS"
    (tmp_path / "tampered.json").write_text(json.dumps(report))
    page = render_html(load_input(tmp_path / "tampered.json"))
    assert "The report states PASS, but its items imply INCOMPLETE." in page
