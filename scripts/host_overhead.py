"""Host time per layer of the shared path's attention in a piecewise (eager) step: the fully checked calls
(`write_live_kv` + `CartridgeAttention.run`) against the serving hot path (`LivePages.write` + `run_layer` over
operands checked once), through Triton's JIT launch and through the compiled kernels' own launchers
(`direct_launch`, cartridge_attn.launch), in one process so that all see the same host.

    python scripts/host_overhead.py [--layers 36] [--steps 30] [--queries 64] [--prefill-impl gluon] [--out FILE.json]

Qwen3-8B attention (32 query / 8 KV heads, head_dim 128), 8-token pages, a 632-position K16/V8 cartridge, one
request of ``--queries`` new tokens (a batch-1 prefill, the step behind the time to the first token). Each step
launches every layer back to back without synchronizing (as vLLM does) and the host time of the launches is
taken per layer; the medians over steps are printed, and the outputs of every path are compared bit for bit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from cartridge_attn import CartridgeAttention, check_live_pages, random_problem
from cartridge_attn.cache_write import write_live_kv

FP8 = torch.float8_e4m3fn


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument(
        "--prefill-impl",
        choices=["triton", "gluon"],
        default=None,
        help="the prefill kernel (default: the dispatch's on this device)",
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--device", default="cuda", help="cpu: the Triton interpreter (TRITON_INTERPRET=1), a smoke test")
    args = ap.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    q_len = args.queries
    pr = random_problem(
        [q_len], [q_len], num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=8, cartridge_len=632,
        cartridge_v_dtype=FP8, device=dev, spare_pages=64,
    )  # fmt: skip
    attn = CartridgeAttention(prefill_impl=args.prefill_impl)
    attn.plan(*pr.page_table(), **pr.plan_kwargs(), causal=True)
    key = torch.randn(q_len, 8, 128, device=dev).to(torch.bfloat16)
    value = torch.randn(q_len, 8, 128, device=dev).to(torch.bfloat16)
    slots = torch.arange(q_len, device=dev, dtype=torch.int64)
    out = torch.empty_like(pr.q)
    pages = check_live_pages(key, value, pr.live_k, pr.live_v, slots)
    layer = attn.check_layer(pr.cartridge_k, pr.cartridge_v, pr.paged_kv, q=pr.q, out=out, **pr.run_kwargs())
    direct_pages = check_live_pages(key, value, pr.live_k, pr.live_v, slots, direct_launch=True)
    direct_layer = attn.check_layer(
        pr.cartridge_k, pr.cartridge_v, pr.paged_kv, q=pr.q, out=out, direct_launch=True, **pr.run_kwargs()
    )

    def checked() -> None:
        write_live_kv(key, value, pr.live_k, pr.live_v, slots)
        attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())

    def hot() -> None:
        pages.write(key, value, slots)
        attn.run_layer(pr.q, layer, out)

    def direct() -> None:
        direct_pages.write(key, value, slots)
        attn.run_layer(pr.q, direct_layer, out)

    results = {}
    outputs = {}
    paths = (("checked", checked), ("hot", hot), ("direct", direct), ("checked again", checked))
    for name, fn in paths:
        fn()
        sync()
        per_layer = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            for _ in range(args.layers):
                fn()
            per_layer.append((time.perf_counter() - t0) / args.layers * 1e6)
            sync()
        results[name] = {"median_us": statistics.median(per_layer), "min_us": min(per_layer)}
        out.fill_(float("nan"))
        fn()
        sync()
        outputs[name] = out.clone()
    same = all(torch.equal(outputs["checked"].view(torch.int16), o.view(torch.int16)) for o in outputs.values())
    results["outputs_bit_identical"] = same
    kernel_launches = (direct_layer.launches, direct_layer.gluon_launches, direct_pages.launches)
    results["direct_launches"] = sum(x.direct_launches for x in kernel_launches if x is not None)
    results["prefill"] = attn.plan_info.config.tag
    gpu = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    results["setup"] = vars(args) | {"out": str(args.out) if args.out else None, "gpu": gpu}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    print("| path | host us per layer (median of steps) | min |\n| --- | --- | --- |")
    for name, _ in paths:
        print(f"| {name} | {results[name]['median_us']:.1f} | {results[name]['min_us']:.1f} |")
    print(
        f"prefill {results['prefill']}; outputs bit-identical: {same}; launches that skipped Triton's binding: "
        f"{results['direct_launches']}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
