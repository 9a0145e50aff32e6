"""Nsight Compute: the command that profiles one replay of a worker, and the parsing of its CSV.

Clocks are left alone (`--clock-control none`), like every other measurement here. The worker brackets each
cell's single call with cudaProfilerStart/Stop and an NVTX range named after the cell; ncu profiles only
inside those windows and renames each kernel after its range, which is how counters map back to cells.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

METRICS = (
    "dram__bytes.sum",
    "lts__t_sector_hit_rate.pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
)
_NAMES = {
    "dram__bytes.sum": "dram_bytes",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
}


def range_name(metric_name: str, batch: int, suffix: int) -> str:
    """The NVTX range (and so the renamed kernels) of one cell in a profiled worker."""
    return f"perf:{metric_name}:b{batch}:s{suffix}"


def profile_command(ncu: str, log_file: Path, worker_command: Sequence[str]) -> list[str]:
    return [
        ncu,
        "--csv",
        "--print-units",
        "base",
        "--metrics",
        ",".join(METRICS),
        "--clock-control",
        "none",
        "--profile-from-start",
        "off",
        "--nvtx",
        "--print-nvtx-rename",
        "kernel",
        "--log-file",
        str(log_file),
        *worker_command,
    ]


@dataclass
class _Acc:
    kernels: set[str]
    dram_bytes: float = 0.0
    l2: list[float] | None = None
    occ: list[float] | None = None


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_csv(text: str, cell_names: Sequence[str]) -> dict[str, Any]:
    """Counters per cell: DRAM bytes summed over the cell's kernels, L2 hit rate and occupancy averaged.

    Kernels whose (renamed) name matches no cell are pooled under "unattributed" rather than dropped.
    """
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    acc: dict[str, _Acc] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        name = row.get("Kernel Name", "")
        key = next((c for c in cell_names if c in name), "unattributed")
        value = _number(row.get("Metric Value", ""))
        field = _NAMES.get(row.get("Metric Name", ""))
        if value is None or field is None:
            continue
        a = acc.setdefault(key, _Acc(kernels=set(), l2=[], occ=[]))
        a.kernels.add(f"{row.get('ID', '')}:{name}")
        if field == "dram_bytes":
            a.dram_bytes += value
        elif field == "l2_hit_rate_pct":
            a.l2.append(value)  # type: ignore[union-attr]
        else:
            a.occ.append(value)  # type: ignore[union-attr]
    out: dict[str, Any] = {}
    for key, a in acc.items():
        out[key] = {
            "kernels": len(a.kernels),
            "dram_bytes": a.dram_bytes,
            "l2_hit_rate_pct": sum(a.l2) / len(a.l2) if a.l2 else None,
            "achieved_occupancy_pct": sum(a.occ) / len(a.occ) if a.occ else None,
        }
    return out
