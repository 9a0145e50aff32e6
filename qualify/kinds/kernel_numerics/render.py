"""How `kernel_numerics` items appear on the sign-off page: the matrix as an HTML grid.

Rows phase x live_v, columns the remaining axes, cells by status; the hover text gives the errors against
the tolerance (rtol and atol from the item's parameters, the relative-L2 bound from its check).
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

from qualify.kinds.kernel_numerics.measurements import KernelNumericsMeasurements
from qualify.numerics.check_names import REL_L2_CHECK
from qualify.render.blocks import Figure, Summary, checks, read_measurements
from qualify.render.fmt import as_dict, as_text, number
from qualify.render.view import item_status, worst_status

ROW_AXES = ("phase", "live_v")
COLUMN_AXES = ("page_size", "cartridge_len", "head_dim", "batch")


def _axis_key(value: Any) -> tuple[int, float, str]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, as_text(value))


def _coords(item: dict[str, Any], axes: tuple[str, ...]) -> tuple[Any, ...]:
    m = read_measurements(KernelNumericsMeasurements, item)
    if m is not None:
        return tuple(getattr(m, a) for a in axes)
    # A skipped item has no measurements; its parameters still say where in the matrix it belongs.
    params = as_dict(item.get("parameters"))
    return tuple(params.get(a) for a in axes)


def _rel_l2_bound(item: dict[str, Any]) -> Any:
    """The bound of the item's relative-L2 check against the reference (the first such check)."""
    return next((c.get("threshold") for c in checks(item) if as_text(c.get("name")) == REL_L2_CHECK), None)


def _label(axes: tuple[str, ...], coords: tuple[Any, ...]) -> str:
    return " ".join(f"{a}={as_text(v) if v is not None else '?'}" for a, v in zip(axes, coords, strict=True))


@dataclass(frozen=True)
class _Cell:
    status: str
    contract: bool
    text: str
    tip: str


def _cell(cell_items: list[dict[str, Any]]) -> _Cell:
    status = worst_status([item_status(i) for i in cell_items])
    first = next((i for i in cell_items if item_status(i) == status), cell_items[0])
    m = read_measurements(KernelNumericsMeasurements, first)
    contract = m is None or m.contract  # unknown counts as binding: it is the stricter reading
    if status in ("passed", "failed") and m is not None:
        text = f"rel_l2 {number(m.rel_l2, 2)}"
        params = as_dict(first.get("parameters"))
        tip = (
            f"{as_text(first.get('name'))}: max_abs_err {number(m.max_abs_err)}, "
            f"max_rel_err {number(m.max_rel_err)}, rel_l2 {number(m.rel_l2)}; tolerance rtol "
            f"{number(params.get('rtol'))} atol {number(params.get('atol'))} rel_l2 {number(_rel_l2_bound(first))}"
        )
    else:
        text = "not run" if status == "skipped" else status
        tip = f"{as_text(first.get('name'))}: {as_text(first.get('reason'))}"
    if len(cell_items) > 1:
        tip += f" ({len(cell_items)} items share this cell; the worst is shown)"
    return _Cell(status, contract, text, tip)


def numerics_grid(items: list[dict[str, Any]]) -> str:
    if not items:
        return ""
    cells: dict[tuple[tuple[Any, ...], tuple[Any, ...]], list[dict[str, Any]]] = {}
    for item in items:
        cells.setdefault((_coords(item, ROW_AXES), _coords(item, COLUMN_AXES)), []).append(item)
    rows = sorted({r for r, _ in cells}, key=lambda r: [_axis_key(v) for v in r])
    cols = sorted({c for _, c in cells}, key=lambda c: [_axis_key(v) for v in c])
    head = "".join(f"<th scope='col'>{escape(_label(COLUMN_AXES, c)).replace(' ', '<br>')}</th>" for c in cols)
    body = []
    for r in rows:
        tds = []
        for col in cols:
            group = cells.get((r, col))
            if group is None:
                tds.append("<td class='cell absent'>–</td>")
                continue
            cell = _cell(group)
            cls = f"cell {cell.status}" + ("" if cell.contract else " informational")
            note = "" if cell.contract else "<br><small>info only</small>"
            tds.append(f"<td class='{cls}' title='{escape(cell.tip)}'>{escape(cell.text)}{note}</td>")
        body.append(f"<tr><th scope='row'>{escape(_label(ROW_AXES, r))}</th>{''.join(tds)}</tr>")
    return (
        "<div class='scroll'><table class='grid'>"
        f"<thead><tr><th></th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        "<p class='legend'><span class='cell passed'>passed</span> <span class='cell failed'>failed</span> "
        "<span class='cell skipped'>not run</span> <span class='cell error'>error</span> "
        "<span class='cell passed informational'>outside the kernel contract</span></p>"
    )


class KernelNumericsRender:
    def figures(self, items: list[dict[str, Any]]) -> list[Figure]:
        return [
            Figure(
                id="plot-numerics",
                title="Kernel numerics matrix",
                body=numerics_grid(items),
                caption=(
                    "Rows: phase and live V; columns: the remaining axes. Hover a cell for its errors and tolerance."
                ),
                absent="No kernel_numerics items in this report.",
            )
        ]

    def summaries(self, items: list[dict[str, Any]]) -> list[Summary]:
        return []


RENDER = KernelNumericsRender()
