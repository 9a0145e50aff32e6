"""Nsight Compute: which counters to ask for, the command that profiles one replay of a worker, and the parsing of
its CSV.

The counters are a wish list (`COUNTERS`): DRAM and L2 traffic, L2 hit rate, achieved occupancy, registers and shared
memory per block, tensor-pipe instruction counts (all, and wgmma alone), conversion instruction counts, the kernels'
durations and the warp stall reasons. Metric names differ between ncu versions and chips, so each counter lists its
candidates and the profile asks for the first one the host's ``ncu --query-metrics`` offers; a counter none of whose
names it offers is recorded as missing, not guessed. Clocks are left alone (`--clock-control none`), like every other
measurement here. The worker brackets each cell's single call with cudaProfilerStart/Stop and an NVTX range named after
the cell; ncu profiles only inside those windows and renames each kernel after its range, which is how counters map back
to cells.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Counter:
    """One field of a cell's record: the first of `candidates` this ncu offers, aggregated over the cell's kernels
    by `how` (sum, mean or max)."""

    field: str
    how: str
    candidates: tuple[str, ...]


# Warp stall reasons, as a share of active warps per cycle (ncu's "per_warp_active.pct" ratios): the ones the issue's
# record names first (dependency = short scoreboard and wait, barrier, long scoreboard), then the rest.
STALL_REASONS = (
    "long_scoreboard", "short_scoreboard", "wait", "barrier", "math_pipe_throttle", "mio_throttle", "lg_throttle",
    "not_selected", "selected", "no_instruction", "dispatch_stall", "branch_resolving", "membar", "sleeping",
    "drain", "imc_miss", "tex_throttle", "misc",
)  # fmt: skip
STALL_PREFIX = "stall_"
# Recorded, never ranked among the top stalls: "selected" is the warp issuing, "not_selected" an eligible warp
# another one beat to the issue slot.
NOT_STALLS = frozenset({f"{STALL_PREFIX}selected_pct", f"{STALL_PREFIX}not_selected_pct"})

COUNTERS: tuple[Counter, ...] = (
    Counter("dram_bytes", "sum", ("dram__bytes.sum",)),
    Counter("dram_read_bytes", "sum", ("dram__bytes_read.sum",)),
    Counter("l2_bytes", "sum", ("lts__t_bytes.sum",)),
    Counter("l2_hit_rate_pct", "mean", ("lts__t_sector_hit_rate.pct",)),
    Counter("achieved_occupancy_pct", "mean", ("sm__warps_active.avg.pct_of_peak_sustained_active",)),
    Counter("registers_per_thread", "max", ("launch__registers_per_thread",)),
    Counter("shared_mem_per_block_bytes", "max", ("launch__shared_mem_per_block",)),
    Counter("dynamic_shared_mem_per_block_bytes", "max", ("launch__shared_mem_per_block_dynamic",)),
    # Both, not one as the other's fallback: the tensor pipe's warp instructions (wgmma and mma.sync: on the H200,
    # ncu's hmma-pipe count equals the wgmma count in a kernel that issues only wgmma, 2026-12-04) and the wgmma
    # ones alone, which tell Hopper's warpgroup MMA (prefill's 64- and 128-row tiles, FA3) from decode's mma.sync.
    # Asking for wgmma first and falling back recorded decode's tensor work as 0; reports made before 2026-12-04
    # hold that wgmma-first count under the name tensor_instructions.
    Counter("tensor_instructions", "sum", ("sm__inst_executed_pipe_tensor_op_hmma.sum",)),
    Counter("wgmma_instructions", "sum", ("sm__inst_executed_pipe_tensor_op_gmma.sum",)),
    Counter("duration_ns", "sum", ("gpu__time_duration.sum",)),
    Counter("conversion_thread_instructions", "sum", ("smsp__sass_thread_inst_executed_op_conversion_pred_on.sum",)),
    Counter("instructions", "sum", ("smsp__inst_executed.sum",)),
    *(
        Counter(f"{STALL_PREFIX}{r}_pct", "mean", (f"smsp__warp_issue_stalled_{r}_per_warp_active.pct",))
        for r in STALL_REASONS
    ),
)
# What every ncu since 2019 offers: profiled, with the launch statistics, when the query of the available metrics
# fails.
CORE_FIELDS = ("dram_bytes", "l2_hit_rate_pct", "achieved_occupancy_pct")
TOP_STALLS = 3


@dataclass(frozen=True)
class MetricPlan:
    """The metrics one profile asks for, the field each feeds, and the fields this ncu could not give."""

    by_metric: dict[str, Counter]
    missing: tuple[str, ...]

    @property
    def metrics(self) -> list[str]:
        return list(self.by_metric)


def query_command(ncu: str) -> list[str]:
    return [ncu, "--query-metrics"]


def available_bases(query_output: str) -> set[str]:
    """Base metric names (``unit__counter``) in the output of ``ncu --query-metrics``, in its table or CSV form."""
    found = set()
    for line in query_output.splitlines():
        token = re.split(r'[\s,"]+', line.strip().strip('"'), maxsplit=1)[0]
        if re.fullmatch(r"[a-z0-9]+__[a-z0-9_]+", token):
            found.add(token)
    return found


def plan_metrics(bases: set[str] | None) -> MetricPlan:
    """Each counter's first candidate whose base this ncu offers; with no query result, the core counters."""
    by_metric: dict[str, Counter] = {}
    missing = []
    for counter in COUNTERS:
        if bases is None:
            known = counter.field in CORE_FIELDS or counter.candidates[0].startswith("launch__")
            chosen = counter.candidates[0] if known else None
        else:
            # Launch statistics come from the launch itself, not from a hardware counter the query lists.
            chosen = next((m for m in counter.candidates if m.startswith("launch__") or m.split(".", 1)[0] in bases),
                          None)  # fmt: skip
        if chosen is None:
            missing.append(counter.field)
        else:
            by_metric[chosen] = counter
    return MetricPlan(by_metric, tuple(missing))


def range_name(metric_name: str, batch: int, suffix: int) -> str:
    """The NVTX range (and so the renamed kernels) of one cell in a profiled worker."""
    return f"perf:{metric_name}:b{batch}:s{suffix}"


def profile_command(ncu: str, log_file: Path, worker_command: Sequence[str], metrics: Sequence[str]) -> list[str]:
    return [
        ncu,
        "--csv",
        "--print-units",
        "base",
        "--metrics",
        ",".join(metrics),
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


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _aggregate(how: str, values: list[float], weights: list[float] | None) -> float:
    if how == "sum":
        return sum(values)
    if how == "max":
        return max(values)
    if weights is not None and sum(weights) > 0:
        # A rate or share of a cell is its kernels' mean weighted by their time: a short scheduling kernel beside
        # the attention kernel must not count as much as it.
        return sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)
    return sum(values) / len(values)


def parse_csv(text: str, cell_names: Sequence[str], plan: MetricPlan | None = None) -> dict[str, Any]:
    """Counters per cell, each field aggregated over the cell's kernels as its `Counter` says (bytes and instruction
    counts summed, rates and stall shares averaged over kernels weighted by their durations when ncu gave every
    kernel's, launch resources their maximum), plus the cell's `top_stalls` (the largest stall shares, largest
    first).

    Kernels whose (renamed) name matches no cell are pooled under "unattributed" rather than dropped.
    """
    by_metric = (plan or plan_metrics(None)).by_metric
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    # cell -> field -> kernel (its ID and name) -> value
    values: dict[str, dict[str, dict[str, float]]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        name = row.get("Kernel Name", "")
        counter = by_metric.get(row.get("Metric Name", ""))
        value = _number(row.get("Metric Value", ""))
        if counter is None or value is None:
            continue
        key = next((c for c in cell_names if c in name), "unattributed")
        values.setdefault(key, {}).setdefault(counter.field, {})[f"{row.get('ID', '')}:{name}"] = value
    out: dict[str, Any] = {}
    hows = {c.field: c.how for c in by_metric.values()}
    for key, fields in values.items():
        kernels = sorted({k for per_kernel in fields.values() for k in per_kernel})
        durations = fields.get("duration_ns", {})
        cell: dict[str, Any] = {"kernels": len(kernels)}
        for f, per_kernel in fields.items():
            names = sorted(per_kernel)
            weights = [durations[k] for k in names] if all(k in durations for k in names) else None
            cell[f] = _aggregate(hows[f], [per_kernel[k] for k in names], weights)
        stalls = sorted(((v, f) for f, v in cell.items() if f.startswith(STALL_PREFIX) and f not in NOT_STALLS),
                        reverse=True)  # fmt: skip
        cell["top_stalls"] = [f.removeprefix(STALL_PREFIX).removesuffix("_pct") for _, f in stalls[:TOP_STALLS]]
        out[key] = cell
    return out
