"""Where a kernel's warps wait, from Nsight Compute's per-SASS-line sampling (`ncu -i REP --page source
--print-source sass --csv`, plain or gzipped): the share of each stall reason and of each opcode, and the lines with
the most samples.

    python3 scripts/ncu_stalls.py results/2026-12-06-gluon-overlap-h100/ncu-gluon-k16v8-b16-s512-sass.csv.gz

Warps of a warp-specialized kernel that have no work (the producer warpgroup's spare warps, parked in their
partition's wait loop) are sampled as much as working ones; `--idle-min` leaves out NOP lines with at least that many
samples, which is where they park, and register-reallocation lines (USETMAXREG), and says how many samples that was.
A file without the sampling column exits 1 with one line naming it.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import re
from collections import Counter
from pathlib import Path

ALL_SAMPLES = "Warp Stall Sampling (All Samples)"


def read_rows(path: Path) -> list[dict[str, str]]:
    """The per-instruction rows of an `ncu --page source --csv` export (its first line names the kernel)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        lines = list(csv.reader(f))
    header = next((i for i, row in enumerate(lines) if ALL_SAMPLES in row), None)
    if header is None:
        raise SystemExit(f"{path}: no '{ALL_SAMPLES}' column (export with --page source --print-source sass --csv)")
    names = lines[header]
    return [dict(zip(names, row, strict=False)) for row in lines[header + 1 :] if len(row) == len(names)]


def opcode(source: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", source.strip()).split(" ")[0]


def summarize(rows: list[dict[str, str]], idle_min: int) -> tuple[int, int, Counter[str], Counter[str]]:
    """(working samples, idle samples, samples per stall reason, samples per opcode)."""
    reasons = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k] if rows else []
    work = idle = 0
    by_reason: Counter[str] = Counter()
    by_op: Counter[str] = Counter()
    for row in rows:
        n = int(row[ALL_SAMPLES] or 0)
        op = opcode(row["Source"])
        if (op == "NOP" and n >= idle_min) or op.startswith("USETMAXREG"):
            idle += n
            continue
        work += n
        by_op[op] += n
        for r in reasons:
            by_reason[r.removeprefix("stall_")] += int(row[r] or 0)
    return work, idle, by_reason, by_op


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--idle-min", type=int, default=1000, help="NOP lines with this many samples are parked warps")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    rows = read_rows(args.csv)
    work, idle, by_reason, by_op = summarize(rows, args.idle_min)
    print(f"{args.csv.name}: {work} samples of working warps ({idle} more of parked warps, left out)")
    print("| stall reason | share |\n| --- | --- |")
    for reason, n in by_reason.most_common(args.top):
        print(f"| {reason} | {100 * n / max(work, 1):.1f} % |")
    print("| opcode | share |\n| --- | --- |")
    for op, n in by_op.most_common(args.top):
        print(f"| {op} | {100 * n / max(work, 1):.1f} % |")


if __name__ == "__main__":
    main()
