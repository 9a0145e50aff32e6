"""Launch one kernel implementation at one point a few times, for Nsight Compute to profile.

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        -k regex:cartridge_attn --launch-skip 3 --launch-count 1 \\
        python3 scripts/profile_decode.py --batch 64 --live 1024

The buffers and the plan are the perf gate's (`qualify.perf.kernel_set`), for one layer.
"""

from __future__ import annotations

import argparse

import torch

from qualify.perf.implementations import KERNEL_SET
from qualify.perf.kernel_set import build, cell_spec
from qualify.perf.metrics import metric
from qualify.perf.spec import ShapeSet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", default="decode", choices=["decode", "prefill"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--live", type=int, default=128, help="live tokens (decode) or suffix length (prefill)")
    ap.add_argument("--implementation", default="fused-k16v8", choices=KERNEL_SET.names())
    ap.add_argument("--launches", type=int, default=6)
    args = ap.parse_args()
    m = metric("decode_tokens_per_s" if args.kind == "decode" else "ttft_proxy_ms")
    # One generated token: decode runs at exactly `live` live tokens.
    shape = ShapeSet(id="profile", batches=[args.batch], suffixes=[args.live], generated_tokens=1)
    spec = cell_spec(shape, m, args.batch, args.live, l2_cold=False, redundant=1, device=torch.device("cuda"), seed=7)
    layer = build(args.implementation, spec).calls[0]
    for _ in range(args.launches):
        layer()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
