"""Bytes the fused decode kernel asks memory for, counted under the Triton interpreter on a CPU host.

    TRITON_INTERPRET=1 PYTHONPATH=kernels python3 scripts/count_loads.py --point 16,1024 --point 1,1024

For each (batch, live tokens) decode point of the perf gate's Qwen3-8B shape (32 query / 8 KV heads, head_dim 128,
a 632-position K16/V8 cartridge, 8-token pages of BF16 live K and V), one launch of the dispatch's decode
configuration runs under the interpreter; every load's unmasked addresses are summed (an address each load asks
for once, however many lanes ask) in bytes, split into the live cache, the cartridge and the rest, beside the
bytes of one read of each. What a GPU's DRAM serves also depends on L2 hits, so this counts requests, not DRAM
traffic: a tile that two programs load is counted twice, and costs DRAM bytes only where the second load misses
L2. The output is also checked against the fp32 reference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _point(text: str) -> tuple[int, int]:
    batch, live = (int(x) for x in text.split(","))
    return batch, live


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--point", action="append", type=_point, required=True, metavar="BATCH,LIVE")
    ap.add_argument("--cartridge-len", type=int, default=632)
    ap.add_argument("--page-size", type=int, default=8)
    ap.add_argument("--json", type=Path, help="write the rows here as well")
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("count_loads.py: set TRITON_INTERPRET=1 (the loads are counted through the Triton interpreter)")

    import numpy as np
    import torch
    from cartridge_attn import CartridgeAttention, kernel_identity, random_problem, reference_attention
    from triton.runtime import interpreter

    requested: list[tuple[np.ndarray, int]] = []
    real_load = interpreter.InterpreterBuilder.create_masked_load

    def counted_load(self, ptrs, mask, *rest):  # the tail differs across Triton versions
        wanted = np.unique(ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)])
        requested.append((wanted, ptrs.get_element_ty().primitive_bitwidth // 8))
        return real_load(self, ptrs, mask, *rest)

    interpreter.InterpreterBuilder.create_masked_load = counted_load
    rows = []
    for batch, live in args.point:
        pr = random_problem([1] * batch, [live] * batch, num_qo_heads=32, num_kv_heads=8, head_dim=128,
                            page_size=args.page_size, cartridge_len=args.cartridge_len, spare_pages=0,
                            cartridge_v_dtype=torch.float8_e4m3fn, live_v_dtype=torch.bfloat16, seed=0)  # fmt: skip
        attn = CartridgeAttention()
        attn.plan(*pr.page_table(), mode="decode", device=pr.q.device, **pr.plan_kwargs())
        out = torch.full_like(pr.q, float("nan"))
        requested.clear()
        start = time.perf_counter()
        attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())
        seconds = time.perf_counter() - start
        ref = reference_attention(pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(),
                                  causal=True, **pr.run_kwargs())  # fmt: skip
        rel = float((out.float() - ref).nan_to_num(nan=float("inf")).norm() / ref.norm())

        def asked(*tensors: torch.Tensor) -> int:
            total = 0
            for t in {id(t.untyped_storage()): t for t in tensors}.values():
                lo, n = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
                total += sum(int(((a >= lo) & (a < lo + n)).sum()) * size for a, size in requested)
            return total

        live_once = sum(t.element_size() * batch * live * t.shape[2] * t.shape[3] for t in (pr.live_k, pr.live_v))
        cart_once = sum(t.element_size() * t.numel() for t in (pr.cartridge_k, pr.cartridge_v))
        everything = sum(int(a.size) * size for a, size in requested)
        live_asked, cart_asked = asked(pr.live_k, pr.live_v), asked(pr.cartridge_k, pr.cartridge_v)
        rows.append({
            "batch": batch, "live": live, "config": kernel_identity(attn)["specialization"],
            "live_asked_mb": live_asked / 1e6, "live_once_mb": live_once / 1e6,
            "cartridge_asked_mb": cart_asked / 1e6, "cartridge_once_mb": cart_once / 1e6,
            "other_asked_mb": (everything - live_asked - cart_asked) / 1e6, "rel_l2": rel, "seconds": seconds,
        })  # fmt: skip
    print("| (batch, live) | configuration | live asked / once, MB | cartridge asked / once, MB | other, MB | rel L2 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| ({r['batch']}, {r['live']}) | `{r['config'].rsplit('/', 1)[1]}` | {r['live_asked_mb']:.2f} / "
              f"{r['live_once_mb']:.2f} | {r['cartridge_asked_mb']:.2f} / {r['cartridge_once_mb']:.2f} | "
              f"{r['other_asked_mb']:.2f} | {r['rel_l2']:.1e} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
