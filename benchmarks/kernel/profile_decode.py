#!/usr/bin/env python3
"""Launch the fused kernel at one benchmark point a few times, for Nsight Compute to profile.

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        -k regex:cartridge_attn --launch-skip 3 --launch-count 1 \\
        python3 benchmarks/kernel/profile_decode.py --batch 64 --live 1024
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_attention as b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="decode", choices=["decode", "prefill"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--live", type=int, default=128)
    ap.add_argument("--v16", action="store_true")
    ap.add_argument("--launches", type=int, default=6)
    args = ap.parse_args()
    pt = b.Point(args.kind, args.batch, args.live, torch.device("cuda"), 7, 1)
    _, fns = pt.fused(args.v16, None)
    for _ in range(args.launches):
        fns[0]()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
