"""Per-layer times of every `kernel` implementation at the kernel record's points, measured by `qualify.perf`.

    python scripts/bench_attention.py --out DIR [--commit SHA] [--only decode|prefill] [--tune]
        [--shapes qwen3-8b p16 d64 g8 g3 smollm2] [--implementations NAME ...] [--l2 cold|warm|both]

A driver, not a harness: each implementation of the kernel set (`qualify.perf.implementations.KERNEL_SET`) is
measured by the perf gate's own worker in a fresh process (`qualify.perf.launch.run_worker`) on the Qwen3-8B
attention shape, at the points of results/2026-11-29-kernel-h200: decode at 128 and 1024 live tokens, prefill of
128- and 512-token suffixes, batches 1, 16 and 64. A step is 36 layers, each with its own buffers (`--l2 warm`: one
set of buffers for all layers, so a layer finds the last one's data in L2); the per-layer time printed is the
step's median over the layers. Also printed: the fused K16/V8 kernel's unique bytes per second against the copy
bandwidth the worker measured, and its speed-up over the faster of the two shared-page baselines (FA3 and FlashInfer
with every request's page table pointing at one copy of the cartridge pages). DIR/bench_results.json holds every
worker's result.

`--shapes` sweeps the attention shape beside the default (`SHAPES`: page size 16, head_dim 64, GQA groups 8 and 3,
SmolLM2-135M's 9 / 3 heads of 64), one table each: the issue's measurement record. A shape FlashInfer has no
compiled module for is JIT-compiled by the worker (minutes); `--implementations` leaves such baselines out.

`--tune` first sweeps the fused kernel's candidate configurations at every point in this process (a table of
per-layer times per configuration, DIR/sweep.json), which is what the kernel's default configuration table
follows; the timed runs after it use the kernel's defaults, as the gate does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cartridge_attn.heuristics import IMPLS

from qualify.errors import QualifyError
from qualify.perf.implementations import KERNEL_SET
from qualify.perf.launch import run_worker
from qualify.perf.metrics import metric
from qualify.perf.spec import ShapeSet, Timing, WorkRequest, WorkResult

PHASES = {  # metric -> (shape-set id, suffixes); decode runs at live = suffix (one generated token)
    "decode_tokens_per_s": ("bench-decode", [128, 1024]),
    "ttft_proxy_ms": ("bench-prefill", [128, 512]),
}
BATCHES = [1, 16, 64]
# Attention shapes of the record: (query heads, KV heads, head_dim, page size, cartridge positions). The cartridge is
# 640 with 16-token pages so that it fills whole pages (the injection baselines copy whole pages).
SHAPES: dict[str, tuple[int, int, int, int, int]] = {
    "qwen3-8b": (32, 8, 128, 8, 632),
    "p16": (32, 8, 128, 16, 640),
    "d64": (32, 8, 64, 8, 632),
    "g8": (64, 8, 128, 8, 632),
    "g3": (24, 8, 128, 8, 632),
    "smollm2": (9, 3, 64, 8, 632),
}
SHARED_PAGE_BASELINES = ("fa3-shared-pages-bf16", "flashinfer-shared-pages-bf16")
DECODE_CANDIDATES = [  # (reqs_per_program, block_n, num_warps, num_stages, splits)
    (1, 64, 4, 3, 1), (1, 128, 4, 3, 1), (1, 128, 4, 4, 1), (1, 128, 8, 3, 1), (1, 256, 8, 2, 1), (1, 256, 4, 2, 1),
    (2, 128, 4, 3, 1), (2, 128, 4, 4, 1), (2, 256, 8, 2, 1), (4, 128, 4, 3, 1), (4, 256, 8, 2, 1),
    # Flash-decoding: each (request, KV head) over several programs (the heuristics choose by SM count alone).
    (1, 128, 4, 2, 2), (1, 128, 4, 2, 4), (1, 128, 4, 2, 8), (1, 128, 4, 2, 16), (1, 64, 4, 2, 4), (1, 64, 4, 2, 8),
    (1, 64, 4, 2, 16),
    # Smaller tiles, several programs per SM: the packed decode at batch 64 runs ~4x slower than its bytes allow
    # (latency-bound with one 106 KB program per SM), so these trade tile width for programs in flight.
    (1, 64, 4, 2, 1), (1, 64, 2, 3, 1), (2, 64, 4, 2, 1), (2, 64, 4, 3, 1), (2, 64, 2, 3, 1), (2, 128, 4, 2, 1),
    (4, 64, 4, 3, 1), (4, 128, 4, 2, 1),
]  # fmt: skip
PREFILL_CANDIDATES = [  # (block_m, block_n, num_warps, num_stages, warp_specialize, cartridge_tma)
    (128, 64, 8, 3, False, False), (128, 64, 8, 4, False, False), (128, 128, 8, 2, False, False),
    (128, 128, 8, 3, False, False), (128, 32, 4, 4, False, False), (128, 64, 4, 3, False, False),
    (128, 64, 4, 2, False, False), (64, 64, 4, 3, False, False), (64, 32, 4, 4, False, False),
    # Triton's Hopper warp specialization (4 warps: one producer and two consumer warpgroups over the tile's rows).
    (128, 32, 4, 4, True, False), (128, 64, 4, 3, True, False), (128, 64, 4, 2, True, False),
    (128, 128, 4, 2, True, False),
    # The cartridge's full tiles through TMA descriptors, alone and under warp specialization (whose producer
    # partition Triton builds around descriptor loads).
    (128, 32, 4, 4, False, True), (128, 64, 4, 3, False, True), (128, 64, 8, 3, False, True),
    (128, 128, 8, 3, False, True), (64, 64, 4, 3, False, True), (64, 32, 4, 4, False, True),
    (128, 32, 4, 4, True, True), (128, 64, 4, 3, True, True), (128, 64, 4, 2, True, True),
    (128, 128, 4, 2, True, True),
]  # fmt: skip
# The Gluon prefill's (block_m, block_n, num_stages, persistent grid): its own warp specialization and TMA, 4-warp
# consumers. 64 x 64 over 2 stages: the tile two programs share an SM with (heuristics.GLUON_TWO_PER_SM_MAX_ROWS);
# over 3 stages with 16-bit live values its build takes 115,084 bytes of shared memory (Triton 3.6, offline), so
# two still fit an SM's 233,472 with their reserved KiB each. Every tile with one program per work item, and the
# 128-row ones on a persistent grid too; 128 x 128 over 3 stages on the persistent grid only (the dispatch's past the
# cut with 16-bit live values).
GLUON_PREFILL_CANDIDATES = [
    (128, 128, 2, False), (64, 128, 2, False), (128, 64, 3, False), (128, 64, 4, False), (64, 64, 2, False),
    (64, 64, 3, False), (128, 128, 2, True), (128, 128, 3, True), (128, 64, 3, True), (128, 64, 4, True),
]  # fmt: skip


def shape_set(metric_name: str, variant: str = "qwen3-8b", batches: list[int] | None = None) -> ShapeSet:
    shape_id, suffixes = PHASES[metric_name]
    qo, kv, d, page, cart = SHAPES[variant]
    return ShapeSet(id=f"{shape_id}-{variant}", num_qo_heads=qo, num_kv_heads=kv, head_dim=d, page_size=page,
                    cartridge_len=cart, batches=batches or BATCHES, suffixes=suffixes,
                    generated_tokens=1)  # fmt: skip


def measure_all(
    metric_names: list[str],
    repetitions: int,
    timeout_s: float,
    *,
    variant: str,
    l2_cold: bool,
    implementations: list[str],
) -> list[WorkResult]:
    """One fresh worker per (implementation, metric) that the implementation supports."""
    timing = Timing(warmups=3, repetitions=repetitions, processes=1, l2_cold=l2_cold)
    results = []
    for impl in KERNEL_SET.implementations:
        if impl.name not in implementations:
            continue
        for name in metric_names:
            if name not in impl.metrics:
                continue
            request = WorkRequest(
                implementation_set=KERNEL_SET.name,
                implementation=impl.name,
                measure=KERNEL_SET.measure,
                metrics=[name],  # type: ignore[list-item]
                shape=shape_set(name, variant).model_dump(),
                timing=timing.model_dump(),
            )
            started = time.perf_counter()
            what = f"[{variant} L2-{'cold' if l2_cold else 'warm'} {impl.name} {name}]"
            try:
                results.append(run_worker(request, timeout_s=timeout_s))
            except QualifyError as exc:  # one baseline that cannot run here is a row of dashes, not a lost sweep
                print(f"{what} failed: {exc.diagnostics()[-300:]}", flush=True)
                continue
            print(f"{what} {time.perf_counter() - started:.0f} s", flush=True)
    return results


def per_layer_us(step_ms: list[float], layers: int) -> float:
    return statistics.median(step_ms) * 1000.0 / layers


def table(results: list[WorkResult], title: str = "") -> str:
    names = [n for n in KERNEL_SET.names() if any(r.implementation == n for r in results)]
    head = ["phase", "B", "tokens", *names, "fused-k16v8 TB/s", "% copy bw", "vs best shared pages"]
    lines = [f"### {title}"] if title else []
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for metric_name, (_, suffixes) in PHASES.items():
        by_impl = {r.implementation: r for r in results if r.cells and r.cells[0].metric == metric_name}
        if not by_impl:  # a phase left out with --only
            continue
        for suffix in suffixes:
            for batch in BATCHES:
                row: list[str] = [metric(metric_name).phase, str(batch), str(suffix)]
                us: dict[str, float] = {}
                for name in names:
                    r = by_impl.get(name)
                    cell = r.cell(metric_name, batch, suffix) if r else None
                    if cell:
                        us[name] = per_layer_us(cell.step_ms, cell.detail["layers"])
                    row.append(f"{us[name]:.1f}" if name in us else "-")
                fused = by_impl.get("fused-k16v8")
                cell = fused.cell(metric_name, batch, suffix) if fused else None
                if cell:
                    tbps = cell.bytes_moved / (statistics.median(cell.step_ms) / 1000.0) / 1e12
                    row += [f"{tbps:.2f}", "-" if cell.pct_peak_bw is None else f"{cell.pct_peak_bw:.1f}"]
                else:
                    row += ["-", "-"]
                best = min((us[b] for b in SHARED_PAGE_BASELINES if b in us), default=None)
                row.append(f"{best / us['fused-k16v8']:.2f}x" if best and "fused-k16v8" in us else "-")
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def warp_specialization_problem(tma: bool) -> str | None:
    """None when the warp-specialized prefill (over TMA cartridge loads with ``tma``) compiles specialized and
    matches the reference on this GPU (its GPU test); else why not. It runs in a child process: a compiler abort in
    this one would lose the whole sweep."""
    variant = "k16v8-tma-warp-specialized" if tma else "k16v8-warp-specialized"
    test = f"tests/kernels/test_cartridge_attn_gpu.py::test_qwen_prefill_variable_lengths[{variant}]"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    return None if proc.returncode == 0 else f"warp specialization probe failed: {(proc.stdout + proc.stderr)[-300:]}"


def sweep(
    metric_names: list[str],
    variant: str,
    batches: list[int] | None = None,
    decode_candidates: list[tuple[int, ...]] | None = None,
    prefill_impls: tuple[str, ...] = ("triton",),
) -> list[dict[str, Any]]:
    """Per-layer time of the fused K16/V8 kernel under every candidate configuration, at every point (`batches`
    and `decode_candidates` narrow a sweep to a few points and configurations; `prefill_impls` names the prefill
    implementations whose candidates are swept)."""
    import cartridge_attn as ca
    import torch

    from qualify.perf.kernel_set import build, cell_spec
    from qualify.perf.timing import time_step

    device = torch.device("cuda", 0)
    ws_problem = {tma: warp_specialization_problem(tma) if "ttft_proxy_ms" in metric_names else None
                  for tma in (False, True)}  # fmt: skip
    for problem in ws_problem.values():
        if problem:
            print(problem, flush=True)
    rows = []
    decode = decode_candidates or DECODE_CANDIDATES
    for metric_name in metric_names:
        shape, m = shape_set(metric_name, variant, batches), metric(metric_name)
        group = shape.num_qo_heads // shape.num_kv_heads
        for suffix in shape.suffixes:
            for batch in shape.batches:
                live = shape.decode_live(suffix) if m.phase == "decode" else suffix
                prefill = [*(PREFILL_CANDIDATES if "triton" in prefill_impls else []),
                           *(GLUON_PREFILL_CANDIDATES if "gluon" in prefill_impls else [])]  # fmt: skip
                for cand in decode if m.phase == "decode" else prefill:
                    if m.phase == "decode":
                        # An omitted cascade field is the dispatch's choice; an explicit CR 0 is no cascade.
                        r, bn, w, s, k, cr, cs, pdl = (*cand, *(None,) * (7 - len(cand)), 1)[:8]
                        cfg = ca.decode_config(group, shape.head_dim, batch, live, reqs=r, block_n=bn, num_warps=w,
                                               num_stages=s, splits=k or None, cart_rows=cr,
                                               cart_splits=cs or None, cart_pdl=bool(pdl),
                                               num_kv_heads=shape.num_kv_heads,
                                               cartridge_len=shape.cartridge_len)  # fmt: skip
                    elif len(cand) == 4:
                        bm, bn, s, persistent = cand
                        cfg = ca.prefill_config(group, shape.head_dim, block_m=bm, block_n=bn, num_stages=s,
                                                impl="gluon", persistent=persistent)  # fmt: skip
                    else:
                        bm, bn, w, s, ws, tma = cand
                        cfg = ca.prefill_config(group, shape.head_dim, block_m=bm, block_n=bn, num_warps=w,
                                                num_stages=s, warp_specialize=ws, cartridge_tma=tma)  # fmt: skip
                    row: dict[str, Any] = {"phase": m.phase, "batch": batch, "tokens": suffix, "config": cfg.as_dict()}
                    if cfg.warp_specialize and ws_problem[cfg.cartridge_tma]:
                        rows.append({**row, "error": ws_problem[cfg.cartridge_tma]})
                        continue
                    try:
                        spec = cell_spec(shape, m, batch, suffix, l2_cold=True, redundant=1, device=device, seed=1234,
                                         kernel_config=cfg)  # fmt: skip
                        built = build("fused-k16v8-gluon" if cfg.impl == "gluon" else "fused-k16v8", spec)
                        t = time_step(built.calls, warmups=2, repetitions=8)
                        row["per_layer_us"] = per_layer_us(t.samples_ms, shape.num_layers)
                        # What the variant costs the SM (the occupancy it allows): registers, spills, shared memory.
                        facts = built.identity() if built.identity is not None else {}
                        row["binary"] = {k: facts.get(k) for k in ("registers", "spills", "shared_bytes")}
                    except Exception as exc:  # a configuration the kernel refuses is a result of the sweep
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    rows.append(row)
                    torch.cuda.empty_cache()
                    print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for the JSON files")
    ap.add_argument("--commit", default="unknown", help="git commit of the tree (the GPU host has no .git)")
    ap.add_argument("--only", choices=["decode", "prefill", "all"], default="all")
    ap.add_argument("--repetitions", type=int, default=40, help="timed steps per cell")
    ap.add_argument("--tune", action="store_true", help="sweep the fused kernel's configurations first")
    ap.add_argument("--sweep-only", action="store_true", help="with --tune: the sweep alone, no benchmark after it")
    ap.add_argument("--worker-timeout", type=float, default=300.0, help="seconds per worker process")
    ap.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=["qwen3-8b"], help="attention shapes")
    ap.add_argument("--implementations", nargs="+", choices=KERNEL_SET.names(), default=KERNEL_SET.names())
    ap.add_argument(
        "--l2", choices=["cold", "warm", "both"], default="cold", help="each layer's own buffers or one set"
    )
    ap.add_argument("--batches", nargs="+", type=int, help="with --tune: sweep only these batches")
    ap.add_argument("--decode-candidates", nargs="+", metavar="R,BN,W,S,K[,CR,CS[,P]]",
                    help="with --tune: these decode configurations (requests per program, block_n, warps, stages, "
                         "splits, 0 for the default; a decode cascade's rows per tile, 0 for none, its cartridge "
                         "ranges, 0 for the default, and P 0 for a live walk launched after it, not as its "
                         "programmatic dependent; without CR the dispatch decides) instead of the built-in "
                         "list")  # fmt: skip
    ap.add_argument("--prefill-impls", nargs="+", choices=IMPLS, default=["triton"],
                    help="with --tune: the prefill implementations whose candidates are swept")  # fmt: skip
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    candidates = None
    if args.decode_candidates:
        try:
            candidates = [tuple(int(x) for x in c.split(",")) for c in args.decode_candidates]
        except ValueError:
            ap.error(f"--decode-candidates: integers R,BN,W,S,K, got {args.decode_candidates}")
        if any(len(c) not in (5, 6, 7, 8) for c in candidates):
            ap.error(f"--decode-candidates: 5 to 8 integers each (R,BN,W,S,K[,CR,CS[,P]]): {args.decode_candidates}")
    wanted = {"decode": ["decode_tokens_per_s"], "prefill": ["ttft_proxy_ms"]}.get(args.only, list(PHASES))
    env = {
        "commit": args.commit,
        "command": " ".join(sys.argv),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if args.tune:
        # The configurations are swept at the first shape (the one the dispatch table is tuned on).
        rows = sweep(wanted, args.shapes[0], args.batches, candidates, tuple(args.prefill_impls))
        (args.out / "sweep.json").write_text(json.dumps({"env": env, "sweep": rows}, indent=1))
        if args.sweep_only:
            return 0
    runs = []
    for variant in args.shapes:
        for cold in {"cold": [True], "warm": [False], "both": [True, False]}[args.l2]:
            results = measure_all(wanted, args.repetitions, args.worker_timeout, variant=variant, l2_cold=cold,
                                  implementations=args.implementations)  # fmt: skip
            runs.append({"shape": variant, "l2_cold": cold, "results": results})
    doc = {"env": env, "shapes": {v: SHAPES[v] for v in args.shapes},
           "runs": [{**r, "results": [w.model_dump() for w in r["results"]]} for r in runs]}  # fmt: skip
    (args.out / "bench_results.json").write_text(json.dumps(doc, indent=1))
    for r in runs:
        qo, kv, d, page, cart = SHAPES[r["shape"]]
        l2 = "cold" if r["l2_cold"] else "warm"
        title = f"{r['shape']}: {qo} / {kv} heads, head_dim {d}, page {page}, cartridge {cart}, L2 {l2}"
        print(table(r["results"], title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
