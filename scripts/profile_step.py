"""Where the time of a batch goes in vLLM, for one serving layout: torch.profiler over one batch.

    python scripts/profile_step.py --layout shared-k16v8 --batch 64 --out DIR

Builds the layout's engine (Qwen3-8B architecture, dummy weights, fixtures/qwen3_8b) in vLLM's default mode
(CUDA graphs for batches 1, 16 and 64; ``--eager`` for eager mode), sends two warm-up batches and three timed ones
(cartridge + 64 question tokens, 32 generated), then one batch under the profiler. Prints and writes
(DIR/<layout>-b<batch>-g<gen>[-eager].json): wall time, the summed GPU kernel time and its share of the wall time (the
GPU busy fraction), kernel launches per generated token, the attention kernels' time per layer and token, and
the operators with the most host time and the kernels with the most GPU time. The profiler adds host overhead of
its own; compare layouts with each other, not with the unprofiled timings.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch

from qualify.serve.engine import build_llm, prompt_token_ids, random_questions, run_batch, write_random_cartridge
from qualify.serve.layouts import layout as get_layout
from qualify.serve.settings import EngineSettings

# The attention kernels of the layouts: the fused kernel, FA3 (vLLM's flash_attn), and the KV-cache writes.
ATTENTION_KERNEL = re.compile(r"cartridge_attn|_write_live_kv|flash::|FlashAttn|flash_fwd|reshape_and_cache")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--suffix", type=int, default=64)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--cartridge-len", type=int, default=632)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--eager", action="store_true")
    args = ap.parse_args()
    lay = get_layout(args.layout)
    settings = EngineSettings(enforce_eager=args.eager, cudagraph_capture_sizes=[1, 16, 64])
    vocab = int(settings.hf_config()["vocab_size"])
    rng = random.Random(7)

    def prompts() -> list[list[int]]:
        qs = random_questions(args.batch, args.suffix, vocab, rng, settings.placeholder_token_id)
        return prompt_token_ids(lay, qs, args.cartridge_len, settings.placeholder_token_id)

    with tempfile.TemporaryDirectory() as tmp:
        cart = write_random_cartridge(Path(tmp) / "c.safetensors", settings, args.cartridge_len, 7)
        llm = build_llm(lay, cart, args.cartridge_len, settings, seed=7)
        for _ in range(2):
            run_batch(llm, prompts(), args.gen)
        timed = [run_batch(llm, prompts(), args.gen) for _ in range(3)]
        batch = prompts()
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            t0 = time.perf_counter()
            run_batch(llm, batch, args.gen)
            prof_wall = time.perf_counter() - t0
    events = prof.key_averages()
    gpu_us = sum(e.self_device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    host = sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]
    kernels = sorted((e for e in events if e.self_device_time_total > 0), key=lambda e: -e.self_device_time_total)[:15]
    launches = sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    attention = [e for e in events if e.self_device_time_total > 0 and ATTENTION_KERNEL.search(e.key)]
    layers = int(settings.hf_config()["num_hidden_layers"])
    attn_us = sum(e.self_device_time_total for e in attention)
    summary = {
        "layout": lay.name,
        "batch": args.batch,
        "mode": "eager" if args.eager else "CUDA graphs",
        "kernel_launches_per_token": launches / args.gen,
        "attention_kernels": sorted({e.key[:80] for e in attention}),
        # prefill included: one batch is one prefill step and gen - 1 decode steps
        "attention_us_per_layer_per_step": attn_us / (layers * args.gen),
        "unprofiled_wall_ms": [t.wall_s * 1e3 for t in timed],
        # --gen 1: the batch is its prefill step alone, so there is no decode step to time
        "unprofiled_decode_step_ms": statistics.median((t.wall_s - max(t.ttft_s)) / (args.gen - 1) * 1e3 for t in timed)
        if args.gen > 1
        else None,
        "unprofiled_ttft_p50_ms": statistics.median(t.ttft_quantile_ms(0.5) for t in timed),
        "profiled_wall_ms": prof_wall * 1e3,
        "gpu_kernel_ms": gpu_us / 1e3,
        "gpu_share_of_wall": gpu_us / 1e6 / prof_wall,
        "top_host_ops": [
            {"name": e.key[:80], "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1e3} for e in host
        ],
        "top_gpu_kernels": [
            {"name": e.key[:80], "calls": e.count, "gpu_ms": e.self_device_time_total / 1e3} for e in kernels
        ],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"{lay.name}-b{args.batch}-g{args.gen}{'-eager' if args.eager else ''}"
    (args.out / f"{name}.json").write_text(json.dumps(summary, indent=1))
    step = summary["unprofiled_decode_step_ms"]
    print(f"== {name}: unprofiled TTFT p50 {summary['unprofiled_ttft_p50_ms']:.1f} ms, decode step "
          f"{'-' if step is None else f'{step:.1f}'} ms; "
          f"profiled wall {prof_wall * 1e3:.0f} ms, GPU kernels {gpu_us / 1e3:.0f} ms "
          f"({summary['gpu_share_of_wall']:.0%}), {summary['kernel_launches_per_token']:.0f} launches per token, "
          f"attention {summary['attention_us_per_layer_per_step']:.1f} us per layer and step")  # fmt: skip
    for row in summary["top_host_ops"][:10]:
        print(f"  host {row['self_cpu_ms']:8.1f} ms {row['calls']:6d}x  {row['name']}")
    for row in summary["top_gpu_kernels"][:8]:
        print(f"  gpu  {row['gpu_ms']:8.1f} ms {row['calls']:6d}x  {row['name']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
