"""The sign-off page: sections, plots from measurements, honest not-run cells, escaping, no external resources."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from _render_items import HOSTILE
from _render_signed import Signed

from qualify.cli import main
from qualify.kinds.loss_increase.render import layout_class
from qualify.render.html import render_html
from qualify.render.source import load_input
from qualify.render.view import worst_status

SECTIONS = ("verdict", "signature", "gates", "plots", "plot-loss", "plot-accuracy", "plot-perf", "plot-numerics",
            "payload", "provenance")  # fmt: skip


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            self.attrs.append((tag, name, value))
            if name == "id" and value:
                self.ids.append(value)


def _parse(page: str) -> _Collect:
    parser = _Collect()
    parser.feed(page)
    return parser


def _section(page: str, section_id: str) -> str:
    start = page.index(f"id='{section_id}'")
    ends = [e for e in (page.find("<section id=", start), page.find("</figure>", start)) if e > 0]
    return page[start : min(ends) if ends else None]


@pytest.fixture(scope="module")
def page(signed: Signed) -> str:
    return render_html(load_input(signed.envelope, signed.public_key))


def test_every_section_is_present_in_order(page: str) -> None:
    ids = _parse(page).ids
    assert [s for s in SECTIONS if s in ids] == list(SECTIONS)
    positions = [page.index(f"id='{s}'") for s in ("verdict", "gates", "plots", "payload", "provenance")]
    assert positions == sorted(positions)


def test_verdict_and_valid_signature_come_first(page: str, signed: Signed) -> None:
    header = page[: page.index("id='gates'")]
    assert ">FAIL<" in header and "v-FAIL" in header
    assert "signature: valid (key id " in header and "sig-valid" in header
    assert "not a release" in header


def test_hostile_strings_are_escaped_everywhere(page: str) -> None:
    assert HOSTILE not in page
    assert "<script" not in page.lower()
    assert "onerror=" not in " ".join(f"{n}={v}" for _, n, v in _parse(page).attrs)
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert _parse(page).tags.count("img") == 0


def test_nothing_can_be_fetched(page: str) -> None:
    parsed = _parse(page)
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(parsed.tags)
    for _, name, value in parsed.attrs:
        assert name not in ("src", "srcset", "action", "xlink:href")
        if name == "href":
            assert value and value.startswith("#")
    assert "url(" not in page and "@import" not in page
    assert "default-src 'none'" in page


def test_loss_plot_colours_layouts_and_marks_the_skipped_checkpoint(page: str) -> None:
    plot = _section(page, "plot-loss")
    # Two checkpoints ran (four layouts each); the third was skipped and has no bar at all.
    # Data bars carry a tooltip; the legend's swatches do not.
    assert len(re.findall(r"class=\"bar-selected\"><title>", plot)) == 2
    assert len(re.findall(r"class=\"bar-keyquant\"><title>", plot)) == 4
    assert 'class="not-run-area"' in plot and ">not run<" in plot
    assert plot.count('class="threshold"') >= 2  # the K16/V8 bound in each group, plus the legend
    assert "K16/V8: 1.2 % [CI 1, 1.4]; bound 1 %" in plot


def test_accuracy_plot_has_the_fixed_axis_and_reference_lines(page: str) -> None:
    plot = _section(page, "plot-accuracy")
    assert ">98<" in plot and ">100.25<" in plot
    assert ">99 %<" in plot and ">99.9 %<" in plot
    assert ">underpowered<" in plot and "hollow" in plot
    assert "◀ 97.5 %" in plot  # below the axis: clamped to the edge, value written out
    assert ">not run<" in plot


def test_perf_plot_shows_each_batch_and_the_threshold(page: str) -> None:
    plot = _section(page, "plot-perf")
    for batch in (1, 8, 32, 64):
        assert f">batch {batch}<" in plot
    assert "threshold 0.95" in plot and 'class="threshold"' in plot
    assert "mark-inconclusive" in plot and "mark-fail" in plot and "mark-pass" in plot
    assert plot.count("<svg") == 1  # the skipped batch joins its metric's plot rather than getting its own


def test_numerics_grid_cells_follow_item_status(page: str) -> None:
    grid = _section(page, "plot-numerics")
    assert len(re.findall(r"<td class='cell skipped[^']*'", grid)) == 2
    assert len(re.findall(r"<td class='cell failed[^']*'", grid)) == 1
    assert "informational" in grid


def test_a_gate_with_a_skipped_item_never_shows_as_passed(page: str) -> None:
    gates = _section(page, "gates")
    row = next(r for r in gates.split("<tr>") if "#gate-1'" in r)  # gpu-bound: skipped only
    assert "status skipped" in row and "status passed" not in row
    assert worst_status(["passed", "skipped", "passed"]) == "skipped"
    assert worst_status([]) == "skipped"


def test_payload_table_appears_once_and_is_deduplicated(page: str) -> None:
    payload = _section(page, "payload")
    for layout in ("K16/V16", "K16/V8", "K8/V16", "K8/V8"):
        assert payload.count(f"<td>{layout}</td>") == 1
    assert "Raw payload (bytes)" not in page  # the item copy of the same table is not repeated
    assert "Per-layout loss" in _section(page, "gates")


def test_provenance_lists_commit_inputs_and_gate_files(page: str, signed: Signed) -> None:
    prov = _section(page, "provenance")
    report = signed.report
    assert report["provenance"]["git"]["commit"] in prov
    for ref in report["inputs"]:
        assert ref["sha256"] in prov
    assert report["gate_files"][0]["sha256"] in prov
    assert "qualification-report.json" in prov  # the signed subjects


def test_an_absent_package_reads_not_installed_and_an_unknown_commit_unknown(signed: Signed) -> None:
    report = json.loads(json.dumps(signed.report))
    versions = report["provenance"]["versions"]
    versions.update({"flashinfer": None, "flashinfer-commit": None, "vllm": "0.26.0"})
    prov = _section(render_html(replace(load_input(signed.envelope, signed.public_key), report=report)), "provenance")
    assert "<td>flashinfer</td><td>not installed</td>" in prov
    assert "<td>flashinfer-commit</td><td>unknown</td>" in prov
    assert "<td>vllm</td><td>0.26.0</td>" in prov


def test_layout_colours() -> None:
    assert layout_class("K16/V8") == "bar-selected"
    assert layout_class("K8/V16") == layout_class("K8/V8") == "bar-keyquant"
    assert layout_class("K16/V16") == "bar-reference"


def test_cli_refuses_to_overwrite_without_force(signed: Signed, tmp_path: Path) -> None:
    out = tmp_path / "signoff.html"
    args = ["render", str(signed.envelope), "--key", str(signed.public_key), "-o", str(out)]
    assert main(args) == 0
    assert "signature: valid" in out.read_text()
    out.write_text("keep me")
    assert main(args) == 2
    assert out.read_text() == "keep me"
    assert main([*args, "--force"]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_cli_exit_status_is_1_for_an_invalid_signature(signed: Signed, tmp_path: Path) -> None:
    out = tmp_path / "signoff.html"
    assert main(["render", str(signed.envelope), "--key", str(signed.other_public_key), "-o", str(out)]) == 1
    assert "signature: INVALID" in out.read_text()
