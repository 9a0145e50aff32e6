"""The self-contained sign-off page: verdict and signature first, then gates, the kinds' plots and summaries,
and provenance.

No script, no external resource: a Content-Security-Policy that allows none is part of the page, so
even a string that escaped escaping could neither run nor fetch anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qualify import __version__
from qualify.registry import GateKindRegistry
from qualify.render import view
from qualify.render.blocks import Figure, Summary
from qualify.render.fmt import MISSING, as_list, as_text, ci, number, with_unit
from qualify.render.html_parts import code, esc, status_badge, table
from qualify.render.html_provenance import provenance_section
from qualify.render.kind_blocks import KindBlocks, kind_blocks
from qualify.render.source import RenderInput, SignatureState
from qualify.render.style import CSS

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def _header(src: RenderInput) -> str:
    report = src.report
    verdict = view.verdict(report)
    sig = src.signature
    counts = view.counts(report)
    release = report.get("release") if isinstance(report.get("release"), dict) else {}
    is_release = release.get("is_release") is True
    suites = ", ".join(as_text(s) for s in as_list(report.get("suites"))) or "qualification"
    sig_note = {
        SignatureState.VALID: "the content below is exactly what was signed",
        SignatureState.INVALID: "the content below is NOT authenticated",
        SignatureState.NOT_CHECKED: "pass --key to check it",
        SignatureState.UNSIGNED: "nothing below is authenticated",
    }[sig.state]
    parts = [
        f"<header id='verdict'><h1>Qualification report: {esc(suites)}</h1><div class='banner'>",
        f"<div class='badge big v-{esc(verdict)}'>{esc(verdict)}<small>verdict</small></div>",
        f"<div class='badge sig-{esc(sig.state.value)}' id='signature'>{esc(sig.label)}"
        f"<small>{esc(sig_note)}</small></div>",
        f"<div class='badge {'v-PASS' if is_release else 'v-INCOMPLETE'}'>"
        f"{'release' if is_release else 'not a release'}<small>{esc(release.get('reason'))}</small></div>",
        "</div>",
        f"<p id='counts'>{esc(view.counts_line(counts))}</p>",
    ]
    if sig.state is SignatureState.INVALID:
        parts.append(
            "<p class='warning'><strong>Do not sign off on this report.</strong> Its signature does not verify; "
            "what follows is what the file claims, not what was qualified.</p>"
        )
    computed = view.computed_verdict(report)
    if verdict != computed:
        parts.append(f"<p class='warning'>The report states {esc(verdict)}, but its items imply {esc(computed)}.</p>")
    missing = view.unqualified_specializations(report)
    if missing:
        parts.append(
            "<p class='warning'>Kernel specializations dispatched by this run but qualified by no passing numerics "
            f"item: {esc(', '.join(missing))}. The measurements on them vouch for nothing.</p>"
        )
    if src.schema_errors:
        errors = "".join(f"<li>{esc(e)}</li>" for e in src.schema_errors)
        parts.append(f"<div class='warning'>The report does not match its schema:<ul>{errors}</ul></div>")
    collect_errors = as_list(report.get("collect_errors"))
    if collect_errors:
        errors = "".join(f"<li><code>{esc(e)}</code></li>" for e in collect_errors)
        parts.append(f"<div class='warning'>Gate files that failed to load:<ul>{errors}</ul></div>")
    parts.append("</header>")
    return "".join(parts)


def _check_cells(row: view.CheckRow) -> list[str]:
    item = [esc(row.item), status_badge(row.status)]
    c = row.check
    if c is None:
        return [*item, f"<em>{esc(row.reason or 'no checks recorded')}</em>", *[""] * 7]
    outcome = view.check_outcome(c)
    unit = as_text(c.get("unit"))
    return [
        *item,
        esc(c.get("name")),
        esc(with_unit(c.get("observed"), unit)),
        esc(f"{as_text(c.get('operator'))} {with_unit(c.get('threshold'), unit)}"),
        esc(with_unit(c.get("decided_on"), unit) if c.get("decided_on") is not None else MISSING),
        esc(ci(c.get("ci_low"), c.get("ci_high"), unit=unit)),
        esc(number(c.get("n"))),
        esc(c.get("statistic")),
        status_badge(outcome),
    ]


def _gate_section(index: int, gate: view.GateView, replaced: Sequence[str]) -> str:
    headers = ["item", "status", "check", "observed", "bound", "decided on", "CI", "n", "statistic", "outcome"]
    rows = [_check_cells(r) for r in view.check_rows(gate)]
    parts = [
        f"<section class='gate' id='gate-{index}'><h3>{esc(gate.gate_id)} {status_badge(gate.status)}</h3>",
        f"<p class='protects'>kind {code(gate.kind)} · {code(gate.gate_file)} · protects: {esc(gate.protects)}</p>",
        table(headers, rows, numeric=(3, 5, 7)),
    ]
    for t in view.item_tables(gate, replaced):
        columns = [as_text(col) for col in as_list(t.get("columns"))]
        body = [[esc(number(v)) for v in as_list(r)] for r in as_list(t.get("rows"))]
        parts += [f"<h4>{esc(t.get('title'))}</h4>", table(columns, body)]
    notes = [as_text(n) for i in gate.items for n in as_list(i.get("notes"))]
    if notes:
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in dict.fromkeys(notes)) + "</ul>")
    parts.append("</section>")
    return "".join(parts)


def _gates(report: dict[str, Any], replaced: Sequence[str]) -> str:
    gates = view.gates(report)
    overview = [
        [
            f"<a href='#gate-{i}'>{esc(g.gate_id)}</a>",
            code(g.kind),
            status_badge(g.status),
            *(esc(g.count(s)) for s in view.STATUSES),
        ]
        for i, g in enumerate(gates)
    ]
    parts = ["<section id='gates'><h2>Gates</h2>"]
    if not gates:
        parts.append("<p class='warning'>The report holds no items: nothing was shown.</p>")
    else:
        parts.append(table(["gate", "kind", "status", *view.STATUS_HEADERS], overview))
    parts += [_gate_section(i, g, replaced) for i, g in enumerate(gates)]
    parts.append("</section>")
    return "".join(parts)


def _figure(fig: Figure) -> str:
    if not fig.body:
        absent = f"<p class='absent-kind'>{esc(fig.absent)}</p>"
        return f"<div id='{esc(fig.id)}'><h3>{esc(fig.title)}</h3>{absent}</div>"
    return (
        f"<figure id='{esc(fig.id)}'><h3>{esc(fig.title)}</h3>{fig.body}"
        f"<figcaption>{esc(fig.caption)}</figcaption></figure>"
    )


def _plots(blocks: KindBlocks) -> str:
    return "".join(["<section id='plots'><h2>Plots</h2>", *(_figure(f) for f in blocks.figures), "</section>"])


def _summary(s: Summary) -> str:
    if not s.rows:
        body = f"<p class='absent-kind'>{esc(s.absent)}</p>"
    else:
        body = table(s.headers, [[esc(c) for c in row] for row in s.rows], numeric=s.numeric)
    return f"<section id='{esc(s.id)}'><h2>{esc(s.title)}</h2>{body}</section>"


def _coverage(report: dict[str, Any]) -> str:
    rows = view.coverage_rows(report)
    if not rows:
        return ""
    body = "".join(
        f"<tr><td><code>{esc(key)}</code></td><td>{esc(', '.join(q)) or '<strong>none</strong>'}</td>"
        f"<td>{esc(', '.join(d)) or '-'}</td></tr>"
        for key, q, d in rows
    )
    return (
        "<section id='coverage'><h2>Kernel specialization coverage</h2><div class='scroll'><table><thead><tr>"
        "<th scope='col'>specialization</th><th scope='col'>qualified by</th><th scope='col'>dispatched by</th>"
        f"</tr></thead><tbody>{body}</tbody></table></div></section>"
    )


def render_html(src: RenderInput, registry: GateKindRegistry | None = None) -> str:
    """The page; every registered kind's render hook contributes its figures and summaries."""
    report = src.report
    title = f"{view.verdict(report)} — qualification report"
    blocks = kind_blocks(report, registry)
    return "".join(
        [
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
            f"<meta http-equiv='Content-Security-Policy' content=\"{_CSP}\">",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
            _header(src),
            _gates(report, blocks.replaced_tables()),
            _coverage(report),
            _plots(blocks),
            *(_summary(s) for s in blocks.summaries),
            provenance_section(src),
            f"<footer>Rendered by cartridge-qualify {esc(__version__)} from {esc(src.source)}. "
            "The signed envelope, not this page, is the record; verify it with <code>qualify verify</code>.</footer>",
            "</body></html>\n",
        ]
    )
