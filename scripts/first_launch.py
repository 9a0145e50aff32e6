"""What the fused kernel's first launch of a batch costs in a fresh process: the compile or cache load Triton does
when a launch needs a binary it has not built, against the same launch once built.

    python scripts/first_launch.py [--out FILE.json]

Qwen3-8B attention (32 query / 8 KV heads, head_dim 128), 8-token pages, a 632-position K16/V8 cartridge, K16/V8
live pages. A sequence of prefill batches (64 new tokens per request) and decode batches (1 token), in an order
that meets each of Triton's integer specializations of the batch size (being 1, divisible by 16, neither) first at
one size and then again at another. The kernel no longer specializes the batch (`do_not_specialize`), so a launch
whose plan variant was seen before should cost a launch whatever its size class, and only a new variant a compile
(a fresh machine has no Triton cache) or a disk-cache load; run with the kernel from before that change on the
PYTHONPATH, a new size class of a known variant compiles too. Each launch is timed to completion from the host,
first and second call.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from cartridge_attn import CartridgeAttention, random_problem
from cartridge_attn import _kernel as K
from cartridge_attn.dispatch import specialization_of
from cartridge_attn.launch import int_specialization

FP8 = torch.float8_e4m3fn
# (kind, requests): each size class met first, then again at another size of the same class.
SEQUENCE = [("prefill", 7), ("prefill", 16), ("prefill", 1), ("prefill", 5), ("prefill", 32), ("prefill", 1),
            ("decode", 24), ("decode", 16), ("decode", 1), ("decode", 40), ("decode", 64), ("decode", 1)]  # fmt: skip


def _timed(fn, sync) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t0) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--device", default="cuda", help="cpu: the Triton interpreter (TRITON_INTERPRET=1), a smoke test")
    ap.add_argument("--limit", type=int, default=len(SEQUENCE), help="only the first LIMIT launches")
    args = ap.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rows = []
    for kind, n in SEQUENCE[: args.limit]:
        q = 64 if kind == "prefill" else 1
        pr = random_problem(
            [q] * n, [q + 64] * n, num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=8, cartridge_len=632,
            cartridge_v_dtype=FP8, live_v_dtype=FP8, device=dev,
        )  # fmt: skip
        attn = CartridgeAttention()
        attn.plan(*pr.page_table(), **pr.plan_kwargs(), causal=True)
        out = torch.full_like(pr.q, float("nan"))

        def run(attn=attn, pr=pr, out=out) -> None:
            attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())

        first, second = _timed(run, sync), _timed(run, sync)
        assert torch.isfinite(out).all(), f"{kind} of {n}: the kernel left non-finite outputs"
        one, by16 = int_specialization(n)
        size_class = "1" if one else ("div16" if by16 else "other")
        variant = specialization_of(attn.plan_info).key
        rows.append({"kind": kind, "requests": n, "size_class": size_class, "variant": variant,
                     "first_ms": first, "second_ms": second})  # fmt: skip
    source = Path(K.__file__).resolve().parent
    print(f"kernels: {source} (a variant ending in 'gl' is the Gluon prefill, _gluon_prefill.py)")
    print("| kind | requests | size class | variant | first launch ms | second ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        cells = (r["kind"], r["requests"], r["size_class"], r["variant"].rsplit("/", 1)[-1])
        print("| " + " | ".join(map(str, cells)) + f" | {r['first_ms']:.1f} | {r['second_ms']:.2f} |")
    if args.out:
        name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu (interpreter)"
        args.out.write_text(json.dumps({"device": name, "kernel": str(source), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
