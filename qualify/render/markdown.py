"""The Markdown summary for $GITHUB_STEP_SUMMARY: verdict and signature first, a compact table per gate, then
the kinds' summary tables.

GitHub refuses a step summary over 1 MiB, so the output is built against a byte budget: long tables
are cut with a note, and gates that no longer fit are counted instead of shown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape
from typing import Any

from qualify.registry import GateKindRegistry
from qualify.render import view
from qualify.render.blocks import Summary
from qualify.render.fmt import MISSING, as_text, ci, with_unit
from qualify.render.kind_blocks import kind_blocks
from qualify.render.source import RenderInput, SignatureState

STEP_SUMMARY_LIMIT = 1024 * 1024
DEFAULT_BUDGET = STEP_SUMMARY_LIMIT - 24 * 1024  # room for whatever else the job appends
MAX_ROWS = 60
# Inline emphasis, code, links and table cells; headings and lists cannot start mid-line.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_ICON = {"PASS": "✅", "FAIL": "❌", "INCOMPLETE": "⚠️", "UNKNOWN": "❓"}
_STATUS = {
    "passed": "✅ passed",
    "failed": "❌ failed",
    "skipped": "⏭️ not run",
    "error": "💥 error",
    "deselected": "⏭️ deselected",
    "incomplete": "⚠️ vacuous/underpowered",
}
_SIG_ICON = {
    SignatureState.VALID: "🔏",
    SignatureState.INVALID: "⛔",
    SignatureState.NOT_CHECKED: "❔",
    SignatureState.UNSIGNED: "⚠️",
}


def md(value: Any, limit: int = 300) -> str:
    """One table-safe line: HTML-escaped (GitHub renders inline HTML), Markdown specials backslashed."""
    s = " ".join(as_text(value, limit).split())
    return _MD_SPECIAL.sub(r"\\\1", escape(s, quote=False))


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], max_rows: int = MAX_ROWS) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows[:max_rows]]
    if len(rows) > max_rows:
        lines.append(f"\n_{len(rows) - max_rows} more rows not shown; see the HTML report._")
    return "\n".join(lines) + "\n"


def _header(src: RenderInput) -> str:
    report = src.report
    verdict = view.verdict(report)
    c = view.counts(report)
    release = report.get("release") if isinstance(report.get("release"), dict) else {}
    lines = [
        f"## {_ICON[verdict]} Qualification: **{verdict}** — "
        f"{_SIG_ICON[src.signature.state]} {md(src.signature.label, 600)}",
        "",
        f"**{'Release' if release.get('is_release') is True else 'Not a release'}**: {md(release.get('reason'))}  ",
        md(view.counts_line(c)),
    ]
    if src.signature.state is SignatureState.INVALID:
        lines += ["", "> [!CAUTION]", "> The signature does not verify: do not sign off on this report."]
    computed = view.computed_verdict(report)
    if computed != verdict:
        lines += ["", f"> [!WARNING]\n> The report states {verdict} but its items imply {computed}."]
    missing = view.unqualified_specializations(report)
    if missing:
        lines += [
            "",
            "> [!WARNING]",
            f"> Dispatched but qualified by no passing numerics item: {md(', '.join(missing))}",
        ]
    if src.schema_errors:
        lines += ["", "> [!WARNING]", f"> The report does not match its schema ({len(src.schema_errors)} problems)."]
    return "\n".join(lines) + "\n"


def _outcome(check: dict[str, Any]) -> str:
    interval = ci(check.get("ci_low"), check.get("ci_high"), unit=as_text(check.get("unit")))
    return view.check_outcome(check) + ("" if interval == MISSING else f" CI {md(interval)}")


def _check_summary(row: view.CheckRow) -> list[str]:
    c = row.check
    if c is None:
        return [md(row.item), _STATUS[row.status], "", "", "", md(row.reason or "no checks recorded")]
    bound = f"{as_text(c.get('operator'))} {with_unit(c.get('threshold'), c.get('unit'))}"
    return [
        md(row.item),
        _STATUS[row.status],
        md(c.get("name")),
        md(with_unit(c.get("observed"), c.get("unit"))),
        md(bound),
        _outcome(c),
    ]


def _gate(gate: view.GateView) -> str:
    rows = [_check_summary(r) for r in view.check_rows(gate)]
    head = (
        f"### {md(gate.gate_id)} — {_STATUS[gate.status]} ({md(gate.kind)})\n\n_protects: {md(gate.protects, 200)}_\n\n"
    )
    return head + _table(["item", "status", "check", "observed", "bound", "outcome"], rows)


def _summary(s: Summary) -> str:
    if not s.rows:
        return ""
    return f"### {md(s.title)}\n\n" + _table([md(h) for h in s.headers], [[md(c) for c in row] for row in s.rows])


def render_markdown(src: RenderInput, budget: int = DEFAULT_BUDGET, registry: GateKindRegistry | None = None) -> str:
    """The summary, at most `budget` UTF-8 bytes; what does not fit is named, not silently dropped."""
    report = src.report
    gates = view.gates(report)
    overview = [
        [
            md(g.gate_id),
            md(g.kind),
            _STATUS[g.status],
            *(str(g.count(s)) for s in view.STATUSES),
        ]
        for g in gates
    ]
    prov = report.get("provenance") if isinstance(report.get("provenance"), dict) else {}
    git = prov.get("git") if isinstance(prov.get("git"), dict) else {}
    footer = (
        f"\n<sub>commit {md(git.get('commit', 'unknown'))}{' (dirty)' if git.get('dirty') is True else ''} · "
        f"rendered from {md(src.source)} (sha256 {src.source_sha256[:16]}…)</sub>\n"
    )
    fixed = [
        _header(src),
        "### Gates\n\n" + _table(["gate", "kind", "status", *view.STATUS_HEADERS], overview),
    ]
    summaries = "\n".join(t for t in (_summary(s) for s in kind_blocks(report, registry).summaries) if t)
    used = sum(len(p.encode()) for p in (*fixed, summaries, footer)) + 200
    sections: list[str] = []
    for i, gate in enumerate(gates):
        text = _gate(gate)
        size = len(text.encode()) + 1
        if used + size > budget:
            sections.append(
                f"_{len(gates) - i} more gate tables omitted to stay under GitHub's size limit; see the HTML report._\n"
            )
            break
        sections.append(text)
        used += size
    out = "\n".join([*fixed, *sections, summaries, footer])
    encoded = out.encode()
    if len(encoded) > budget:  # only when the fixed part alone is oversized (thousands of gates)
        cut = encoded[: budget - 200].decode("utf-8", errors="ignore")
        out = cut + "\n\n_Summary truncated to stay under GitHub's size limit; see the HTML report._\n"
    return out
