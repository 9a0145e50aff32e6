"""HTML building blocks. Cells passed in are HTML already; every report value goes through `esc` first."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from qualify.render.fmt import as_text

MAX_TABLE_ROWS = 500


def esc(value: Any) -> str:
    return escape(as_text(value), quote=True)


def code(value: Any) -> str:
    return f"<code>{esc(value)}</code>"


def status_badge(status: str) -> str:
    label = {"skipped": "not run (skipped)", "incomplete": "incomplete (vacuous/underpowered)"}.get(status, status)
    return f"<span class='status {esc(status)}'>{esc(label)}</span>"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: Sequence[int] = ()) -> str:
    """A scrollable table; past MAX_TABLE_ROWS rows the rest are counted, not shown."""
    head = "".join(f"<th scope='col'>{esc(h)}</th>" for h in headers)
    shown = rows[:MAX_TABLE_ROWS]
    body = []
    for row in shown:
        tds = "".join(f"<td class='num'>{c}</td>" if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        body.append(f"<tr>{tds}</tr>")
    more = ""
    if len(rows) > len(shown):
        more = f"<p class='caution'>{len(rows) - len(shown)} more rows not shown; see the JSON report.</p>"
    return (
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>{more}"
    )


def kv_table(pairs: Sequence[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th scope='row'>{esc(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    return f"<table class='kv'><tbody>{rows}</tbody></table>"
