"""Where the time of a batch goes in vLLM, for one serving layout: torch.profiler over one batch per point.

    python scripts/profile_step.py --layout shared-k16v8 --batch 1 16 64 --ttft --out DIR
    python scripts/profile_step.py --summarize DIR

Builds the layout's engine once (Qwen3-8B architecture, dummy weights, fixtures/qwen3_8b) in vLLM's default mode
(CUDA graphs for batches 1, 16 and 64; ``--eager`` for eager mode). For each batch: two warm-up batches and three
timed ones (cartridge + 64 question tokens, ``--gen`` generated), then one batch under the profiler; with ``--ttft``
the same again with one generated token, which is the prefill step alone (the time to the first token). Prints and
writes DIR/<layout>-b<batch>-g<gen>[-eager].json: wall time, the summed GPU kernel time and its share of the wall
time (the GPU busy fraction), kernel launches per generated token, the attention kernels' GPU time per layer and
step, the host time of vLLM's attention op per layer and step (the op runs outside the CUDA graphs in a piecewise
step, so this is the per-layer host overhead that issue 16 compares with FA3's), and the operators with the most
host time and the kernels with the most GPU time. The profiler adds host overhead of its own; compare layouts
with each other, not with the unprofiled timings. ``--summarize`` prints one table over every file in DIR.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import re
import statistics
import time
from pathlib import Path
from typing import Any

from qualify.serve.config import DEFAULT_KERNEL_LAUNCH, KERNEL_LAUNCHES

# The attention kernels of the layouts: the fused kernel, FA3 (vLLM's flash_attn), and the KV-cache writes.
ATTENTION_KERNEL = re.compile(r"cartridge_attn|_write_live_kv|flash::|FlashAttn|flash_fwd|reshape_and_cache")
# vLLM's attention custom ops (the layer's whole host path: cache write, metadata, the launch).
ATTENTION_OP = re.compile(r"unified_attention|unified_kv_cache_update")
SUMMARY_COLUMNS = (
    ("layout", "layout", "{}"),
    ("batch", "batch", "{}"),
    ("gen", "gen", "{}"),
    ("unprofiled_ttft_p50_ms", "TTFT p50 ms", "{:.1f}"),
    ("unprofiled_decode_step_ms", "decode step ms", "{:.2f}"),
    ("gpu_share_of_wall", "GPU busy", "{:.0%}"),
    ("kernel_launches_per_token", "kernels / token", "{:.0f}"),
    ("attention_us_per_layer_per_step", "attn GPU us / layer / step", "{:.1f}"),
    ("attention_host_us_per_layer_per_step", "attn host us / layer / step", "{:.1f}"),
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout")
    ap.add_argument("--batch", type=int, nargs="+", default=[64])
    ap.add_argument("--suffix", type=int, default=64)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--ttft", action="store_true", help="also profile each batch's prefill step alone (gen 1)")
    ap.add_argument("--cartridge-len", type=int, default=632)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--eager", action="store_true")
    ap.add_argument(
        "--kernel-launch", choices=KERNEL_LAUNCHES, default=DEFAULT_KERNEL_LAUNCH, help="shared layouts' launches"
    )
    ap.add_argument("--summarize", type=Path, help="print one table over the profiles in this folder and exit")
    args = ap.parse_args()
    if args.summarize is not None:
        print(summary_table([json.loads(p.read_text()) for p in sorted(args.summarize.glob("*.json"))]))
        return 0
    if args.layout is None or args.out is None:
        ap.error("--layout and --out are required unless --summarize is given")
    gens = [args.gen, 1] if args.ttft and args.gen != 1 else [args.gen]
    profile_layout(args, [(b, g) for b in args.batch for g in gens])
    return 0


def profile_layout(args: argparse.Namespace, points: list[tuple[int, int]]) -> None:
    from qualify.serve.engine import build_llm, prompt_token_ids, random_cartridge_file, random_questions
    from qualify.serve.layouts import layout as get_layout
    from qualify.serve.settings import EngineSettings

    lay = get_layout(args.layout)
    settings = EngineSettings(
        enforce_eager=args.eager, cudagraph_capture_sizes=[1, 16, 64], kernel_launch=args.kernel_launch
    )
    vocab = int(settings.hf_config()["vocab_size"])
    layers = int(settings.hf_config()["num_hidden_layers"])
    rng = random.Random(7)

    def prompts(batch: int) -> list[list[int]]:
        qs = random_questions(batch, args.suffix, vocab, rng, settings.placeholder_token_id)
        return prompt_token_ids(lay, qs, args.cartridge_len, settings.placeholder_token_id)

    args.out.mkdir(parents=True, exist_ok=True)
    cart = random_cartridge_file(settings, args.cartridge_len, 7)
    llm = build_llm(lay, cart, args.cartridge_len, settings, seed=7)
    for batch, gen in points:
        # The previous point's profiler events are garbage in reference cycles: collected here, not by a full
        # collection inside this point's timed batches (seen on the H200: 250-300 ms pauses in one batch).
        gc.collect()
        summary = profile_point(llm, lambda b=batch: prompts(b), batch, gen, layers)
        summary.update(layout=lay.name, mode="eager" if args.eager else "CUDA graphs", kernel_launch=args.kernel_launch)
        direct = "-direct" if args.kernel_launch == "direct" else ""
        name = f"{lay.name}-b{batch}-g{gen}{'-eager' if args.eager else ''}{direct}"
        (args.out / f"{name}.json").write_text(json.dumps(summary, indent=1))
        print_point(name, summary)


def profile_point(llm: Any, prompts: Any, batch: int, gen: int, layers: int) -> dict[str, Any]:
    import torch

    from qualify.serve.engine import run_batch

    for _ in range(2):
        run_batch(llm, prompts(), gen)
    timed = [run_batch(llm, prompts(), gen) for _ in range(3)]
    profiled = prompts()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        t0 = time.perf_counter()
        run_batch(llm, profiled, gen)
        prof_wall = time.perf_counter() - t0
    events = prof.key_averages()
    cuda = torch.autograd.DeviceType.CUDA
    gpu_us = sum(e.self_device_time_total for e in events if e.device_type == cuda)
    host = sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]
    kernels = sorted((e for e in events if e.self_device_time_total > 0), key=lambda e: -e.self_device_time_total)[:15]
    launches = sum(e.count for e in events if e.device_type == cuda)
    attention = [e for e in events if e.self_device_time_total > 0 and ATTENTION_KERNEL.search(e.key)]
    attn_ops = [e for e in events if e.device_type != cuda and ATTENTION_OP.search(e.key)]
    # One batch is one prefill step and gen - 1 decode steps; a decode step replayed from a full graph runs no
    # attention op on the host, so the host figure is the piecewise (prefill) steps' cost spread over all steps.
    steps = layers * gen
    return {
        "batch": batch,
        "gen": gen,
        "kernel_launches_per_token": launches / gen,
        "attention_kernels": sorted({e.key[:80] for e in attention}),
        "attention_us_per_layer_per_step": sum(e.self_device_time_total for e in attention) / steps,
        "attention_ops": {e.key[:80]: {"calls": e.count, "cpu_ms": e.cpu_time_total / 1e3} for e in attn_ops},
        "attention_host_us_per_layer_per_step": sum(e.cpu_time_total for e in attn_ops) / steps,
        "unprofiled_wall_ms": [t.wall_s * 1e3 for t in timed],
        # gen 1: the batch is its prefill step alone, so there is no decode step to time
        "unprofiled_decode_step_ms": statistics.median((t.wall_s - max(t.ttft_s)) / (gen - 1) * 1e3 for t in timed)
        if gen > 1
        else None,
        "unprofiled_ttft_p50_ms": statistics.median(t.ttft_quantile_ms(0.5) for t in timed),
        "gc_pause_ms": [t.gc.pause_s * 1e3 for t in timed],
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


def print_point(name: str, s: dict[str, Any]) -> None:
    step = s["unprofiled_decode_step_ms"]
    print(f"== {name}: unprofiled TTFT p50 {s['unprofiled_ttft_p50_ms']:.1f} ms, decode step "
          f"{'-' if step is None else f'{step:.2f}'} ms; profiled wall {s['profiled_wall_ms']:.0f} ms, GPU kernels "
          f"{s['gpu_kernel_ms']:.0f} ms ({s['gpu_share_of_wall']:.0%}), {s['kernel_launches_per_token']:.0f} "
          f"launches per token, attention {s['attention_us_per_layer_per_step']:.1f} us GPU and "
          f"{s['attention_host_us_per_layer_per_step']:.1f} us host per layer and step")  # fmt: skip
    for row in s["top_host_ops"][:6]:
        print(f"  host {row['self_cpu_ms']:8.1f} ms {row['calls']:6d}x  {row['name']}")
    for row in s["top_gpu_kernels"][:5]:
        print(f"  gpu  {row['gpu_ms']:8.1f} ms {row['calls']:6d}x  {row['name']}")


def summary_table(profiles: list[dict[str, Any]]) -> str:
    """One Markdown row per profile, ordered by (gen, batch, layout)."""
    rows = sorted(profiles, key=lambda p: (-p["gen"], p["batch"], p["layout"]))
    lines = ["| " + " | ".join(h for _, h, _ in SUMMARY_COLUMNS) + " |", "|" + " --- |" * len(SUMMARY_COLUMNS)]
    for p in rows:
        cells = ["-" if p.get(k) is None else fmt.format(p[k]) for k, _, fmt in SUMMARY_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
