"""scripts/ncu_stalls.py: shares of stall reasons and opcodes from Nsight Compute's per-SASS-line export, with the
parked warps of a warp-specialized kernel left out and counted apart."""

from __future__ import annotations

import csv
import gzip
import random
import subprocess
import sys
from pathlib import Path

from _recorded import RESULTS

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ncu_stalls.py"
HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
          "stall_barrier", "stall_long_sb", "stall_wait", "stall_barrier (Not Issued)"]  # fmt: skip


def _run(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(path), *extra], capture_output=True, text=True)


def _export(path: Path, rows: list[tuple[str, int, int, int]]) -> None:
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "k", ""])
        w.writerow(HEADER)
        for i, (src, barrier, long_sb, wait) in enumerate(rows):
            n = barrier + long_sb + wait
            w.writerow([hex(0x1000 + 16 * i), src, n, n, barrier, long_sb, wait, barrier])


def test_parked_warps_are_left_out_and_shares_are_of_working_samples(tmp_path: Path) -> None:
    rng = random.Random()
    work = [(f"@!P0  {op} R1, R2", rng.randint(1, 50), rng.randint(1, 50), rng.randint(1, 50))
            for op in ("HGMMA.64x128x16.F32", "MUFU.EX2", "BRA", "MUFU.EX2")]  # fmt: skip
    parked = [("NOP", rng.randint(1000, 5000), 0, 0), ("USETMAXREG.DEALLOC.CTAPOOL 0x78", rng.randint(1, 99), 0, 0)]
    rows = work + parked
    rng.shuffle(rows)
    path = tmp_path / "k.csv.gz"
    _export(path, rows)
    out = _run(path).stdout
    total = sum(b + ls + w for _, b, ls, w in work)
    idle = sum(b for _, b, _, _ in parked)
    assert f"{total} samples of working warps ({idle} more of parked warps" in out
    barrier = sum(b for _, b, _, _ in work)
    assert f"| barrier | {100 * barrier / total:.1f} % |" in out
    ex2 = sum(b + ls + w for src, b, ls, w in work if "MUFU.EX2" in src)
    assert f"| MUFU.EX2 | {100 * ex2 / total:.1f} % |" in out  # the predicate is not part of the opcode
    # A NOP under the threshold is a working line.
    assert "| NOP |" in _run(path, "--idle-min", "100000").stdout


def test_the_recorded_profile_reads_as_its_readme_says() -> None:
    out = _run(RESULTS / "2026-12-06-gluon-overlap-h100" / "ncu-gluon-k16v8-b16-s512-sass.csv.gz").stdout
    assert "34161 samples of working warps (11407 more of parked warps" in out
    assert "| barrier | 18.2 % |" in out


def test_an_export_without_sampling_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "details.csv"
    path.write_text('"ID","Kernel Name"\n"0","k"\n')
    r = _run(path)
    assert r.returncode == 1 and str(path) in r.stderr and "Warp Stall Sampling" in r.stderr
