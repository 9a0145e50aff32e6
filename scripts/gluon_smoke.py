"""One launch of the Gluon prefill on one named problem, against the fp32 reference, in this process.

For a first look on an SM90 host, where a hang must cost one variant and not a whole test session: run it once per
variant under `timeout`. Prints one line: variant, configuration, max abs error, relative L2 error, NaN count, whether
a second launch gave the same bits, and the wall time of the first launch (compile included).

    for v in $(python3 scripts/gluon_smoke.py --list); do timeout 60 python3 scripts/gluon_smoke.py --variant $v; done
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))

V8 = "float8_e4m3fn"
# name -> (q_lens, live_lens, cartridge_len, page, head_dim, group, cartridge V, live V, q dtype, block_m, causal)
VARIANTS = {
    "tiny-bf16": ([5, 1], [9, 20], 16, 8, 128, 4, "bfloat16", "bfloat16", "bfloat16", 128, True),
    "tiny-k16v8": ([5, 1], [9, 20], 16, 8, 128, 4, V8, "bfloat16", "bfloat16", 128, True),
    "qwen-p8-k16v8": ([1, 17, 130, 64], [40, 17, 203, 64], 632, 8, 128, 4, V8, "bfloat16", "bfloat16", 128, True),
    "qwen-p16-live8": ([1, 17, 130, 64], [40, 17, 203, 64], 640, 16, 128, 4, V8, V8, "bfloat16", 128, True),
    "qwen-m64": ([1, 17, 130, 64], [40, 17, 203, 64], 632, 8, 128, 4, V8, "bfloat16", "bfloat16", 64, True),
    "g3-d64": ([33, 1, 70], [33, 9, 150], 632, 8, 64, 3, V8, "bfloat16", "bfloat16", 128, True),
    "noncausal-fp16": ([3, 40], [50, 40], 632, 8, 128, 4, "float16", V8, "float16", 128, False),
    "s512": ([512] * 4, [512] * 4, 632, 8, 128, 4, V8, "bfloat16", "bfloat16", 128, True),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", choices=sorted(VARIANTS))
    ap.add_argument("--list", action="store_true", help="print the variant names and exit")
    args = ap.parse_args()
    if args.list or not args.variant:
        print(" ".join(VARIANTS))
        return 0
    import torch
    from cartridge_attn import CartridgeAttention, prefill_config, random_problem, reference_attention

    q_lens, live, cart, page, d, g, cv, lv, qd, bm, causal = VARIANTS[args.variant]
    dt = {n: getattr(torch, n) for n in ("bfloat16", "float16", V8)}
    dev = torch.device("cuda")
    pr = random_problem(q_lens, live, num_qo_heads=8 * g, num_kv_heads=8, head_dim=d, page_size=page,
                        cartridge_len=cart, dtype=dt[qd], cartridge_v_dtype=dt[cv], live_v_dtype=dt[lv],
                        device=dev)  # fmt: skip
    pr.poison_free_slots()
    cfg = prefill_config(g, d, block_m=bm, impl="gluon", live_v_bits=dt[lv].itemsize * 8)
    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), config=cfg, causal=causal, device=dev, **pr.plan_kwargs())
    outs = []
    started = time.perf_counter()
    for _ in range(2):
        out = torch.full_like(pr.q, float("nan"))
        attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())
        torch.cuda.synchronize()
        outs.append(out)
        if len(outs) == 1:
            first_s = time.perf_counter() - started
    ref = reference_attention(pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(),
                              causal=causal, **pr.run_kwargs())  # fmt: skip
    diff = (outs[0].float() - ref).nan_to_num(nan=float("inf"))
    rel = float(diff.norm() / ref.norm())
    same = torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))
    nan = int(torch.isnan(outs[0]).sum())
    ok = nan == 0 and rel < 1.5e-2 and same
    print(f"{args.variant:16s} {cfg.tag:18s} max_abs {float(diff.abs().max()):.3e} rel_l2 {rel:.3e} nan {nan} "
          f"relaunch_same {same} first_launch_s {first_s:.1f} {'OK' if ok else 'BAD'}", flush=True)  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
