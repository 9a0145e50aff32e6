"""The worked example of README "Writing a gate kind": the test-only kind `compare`, installed by entry point,
uses every part a kind may have (fields, lint, runner, typed measurements, render hook) and nothing in the
suite names it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from qualify.cli import main

QUALIFY = Path(__file__).parents[2] / "qualify"


def _gate(tmp_path: Path, value: float, file: str | None = None) -> Path:
    extra = f"\n    file: {file}" if file else ""
    path = tmp_path / "g.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            suite: example
            version: 1
            gates:
              - id: bound
                kind: compare
                requires: [cpu]
                limit: 1.0
                value: {value}"""
        )
        + extra
        + "\n"
    )
    return path


def test_its_lint_rule_reports_the_field_at_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "inputs").mkdir()
    assert main(["lint", str(_gate(tmp_path, 0.5, file="inputs"))]) == 2
    err = capsys.readouterr().err
    assert "'inputs' is a folder, not a file" in err and "g.yaml:" in err
    (tmp_path / "present.bin").write_bytes(b"x")
    assert main(["lint", str(_gate(tmp_path, 0.5, file="present.bin"))]) == 0


@pytest.mark.parametrize(("value", "status"), [(0.5, "passed"), (1.5, "failed")])
def test_its_render_hook_draws_value_and_limit_from_the_report(tmp_path: Path, value: float, status: str) -> None:
    main(["run", str(_gate(tmp_path, value)), "--out", str(tmp_path / "out"), "--name", "r"])
    page = tmp_path / "page.html"
    assert main(["render", str(tmp_path / "out" / "r.json"), "-o", str(page)]) == 0
    html = page.read_text()
    table = html.split("compare: value against limit")[1].split("</table>")[0]
    assert f"<td>bound</td><td class='num'>{value:g}</td><td class='num'>1</td><td>{status}</td>" in table.replace(
        '"', "'"
    )
    assert main(["render", str(tmp_path / "out" / "r.json"), "--format", "md", "-o", str(tmp_path / "s.md")]) == 0
    assert "compare: value against limit" in (tmp_path / "s.md").read_text()


def test_nothing_in_the_suite_names_the_plugin_kind() -> None:
    for path in QUALIFY.rglob("*.py"):
        text = path.read_text()
        assert "qualify_fake_kind" not in text and "CompareParams" not in text, path
