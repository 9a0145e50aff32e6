"""The README's perf tables, from the signed reports of this folder (and, for the column of the last H100 gate, those
of results/2026-12-07-gluon-persistent-cut-h100).

    python results/2026-12-07-gluon-third-stage-h100/tables.py

Per-layer times are the items' medians over the 36 layers they time; ratios and CIs are the gate's own checks.
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
EARLIER = HERE.parent / "2026-12-07-gluon-persistent-cut-h100"
LAYERS = 36
PREFILL_POINTS = [(1, 128), (16, 128), (64, 128), (1, 512), (16, 512), (64, 512)]
DECODE_POINTS = [(1, 128), (1, 1024), (16, 128), (16, 1024), (64, 128), (64, 1024)]

Item = tuple[dict[str, Any], dict[str, Any]]


def perf_items(path: Path) -> dict[tuple[str, str], Item]:
    """(gate id, cell) -> (its check, its measurements) for every perf item that ran."""
    report = json.loads(lzma.decompress(path.read_bytes()))
    return {
        (i["gate_id"], i["cell"]): (i["checks"][0], i["measurements"])
        for i in report["items"]
        if i["kind"] == "perf_nonregression" and i["status"] != "deselected"
    }


def check_text(check: dict[str, Any]) -> str:
    return f"{check['observed']:.3f} ({check['ci_low']:.3f}-{check['ci_high']:.3f}) {check['outcome']}"


def prefill_table(runs: list[dict[tuple[str, str], Item]]) -> list[str]:
    rows = []
    for batch, suffix in PREFILL_POINTS:
        cell = f"ttft_proxy_ms-{batch}-{suffix}"
        cols = [f"({batch}, {suffix})"]
        for run in runs:
            vs_fa3, m = run[("perf-shared-vs-fa3-shared-pages", cell)]
            vs_fi, m_fi = run[("perf-shared-vs-shared-pages", cell)]
            us = [x * 1000 / LAYERS for x in (m["candidate_median"], m["baseline_median"], m_fi["baseline_median"])]
            cols += [" / ".join(f"{x:.1f}" for x in us), check_text(vs_fa3), check_text(vs_fi)]
        rows.append("| " + " | ".join(cols) + " |")
    return rows


def per_layer_us(batch: int, tokens_per_s: float) -> float:
    return batch / tokens_per_s * 1e6 / LAYERS


def copy_bw_pct(m: dict[str, Any], side: str, batch: int, tokens_per_s: float) -> float:
    """The share of the measured copy bandwidth that `side`'s unique bytes per decode step take."""
    return m["bytes_moved"][side] / (batch / tokens_per_s) / (m["peak_bandwidth_tbps"] * 1e12) * 100


def decode_table(run: dict[tuple[str, str], Item]) -> list[str]:
    rows = []
    for page in (8, 16):
        for batch, live in DECODE_POINTS:
            # The items time the middle generated token: 16 tokens short of the point's live length.
            cell = f"decode_tokens_per_s-{batch}-{live - 16}"
            found = {g: v for (g, c), v in run.items() if c == cell and g.endswith(f"-p{page}")}
            vs_fa3, m = next(v for g, v in found.items() if "fa3" in g)
            vs_fi, m_fi = next(v for g, v in found.items() if "flashinfer" in g)
            medians = (m["candidate_median"], m["baseline_median"], m_fi["baseline_median"])
            times = [per_layer_us(batch, t) for t in medians]
            bw = [copy_bw_pct(m, side, batch, m[f"{side}_median"]) for side in ("candidate", "baseline")]
            rows.append(
                f"| {page} | ({batch}, {live}) | " + " | ".join(f"{t:.1f}" for t in times)
                + f" | {check_text(vs_fa3)} | {check_text(vs_fi)} | {vs_fa3['threshold']}"
                + f" | {bw[0]:.1f} / {bw[1]:.1f} | {m['peak_bandwidth_tbps']:.2f} |"
            )  # fmt: skip
    return rows


def main() -> None:
    prefill = [HERE / "call7/shared-pages-h200.json.xz", HERE / "call10/shared-pages-h200.json.xz"]
    prefill.append(EARLIER / "call9/shared-pages-h200.json.xz")
    print("prefill, per layer us: fused / vLLM FA3 / FlashInfer FA3; vs vLLM FA3; vs FlashInfer (calls 7, 10; earlier)")
    print("\n".join(prefill_table([perf_items(p) for p in prefill])))
    targets = {"call 8": HERE / "call8/targets-h200.json.xz", "earlier": EARLIER / "call10/targets-h200.json.xz"}
    for name, path in targets.items():
        print(f"decode targets, {name}: page, point, per layer us fused / FA3 / FlashInfer, vs FA3, vs FlashInfer,")
        print("  target, % copy bandwidth fused / FA3, copy TB/s")
        print("\n".join(decode_table(perf_items(path))))


if __name__ == "__main__":
    main()
