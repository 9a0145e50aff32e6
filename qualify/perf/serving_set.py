"""The `serving` implementation set: each serving layout serves a request stream with the same KV memory.

The equal-memory comparison of issue 16: every layout's engine gets the same KV cache in bytes
(`shape.engine.kv_cache_memory_bytes`), so what it admits at once follows from its bytes per request (a shared
cartridge costs no pages per request, K16/V8 pages 3/4 of BF16 ones, injection the whole cartridge per request),
and vLLM's scheduler queues the rest. Per (clients, suffix) cell the worker serves `repetitions` timed streams of
`shape.stream_requests` requests (`qualify.serve.stream`): closed loop with `clients` clients, or Poisson arrivals
at `shape.arrival_rate_per_s` with at most `clients` in the engine; with `shape.streams`, each named stream in turn
from the same engine (its cells carry the stream's id). Samples per repetition: completed requests/s, output
tokens/s, TTFT and ITL percentiles. Every stream kind gets its own warm-up streams, also in an engine that served
another kind before: on the H200 the first Poisson stream after a closed-loop warm-up lost 1.2-3.5 s of TTFT p95 in
2 of 5 processes of the fused path, and the second none (results/2026-12-02-serving-h200; the likeliest cause is a
Triton specialization compiled on first use: a lone request's prefill, the first arrival into an idle engine, is a
batch a closed loop never makes). The scheduler's running requests and the longest engine step are read after each
step. The cells' detail records the KV capacity, the tokens a request holds and the requests that fit, the peak in
the engine, and (prefix-cached layouts) the cartridge positions the prefix cache served; a prefix-cached worker
whose cache did not serve the cartridge to every request fails, as in the engine set.

With ``QUALIFY_ENGINE_RUNS_DIR`` set, each worker writes its result there as ``serving-<layout>.p<process>.json``.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from qualify.perf.engine_set import check_cartridge_shared, engine_gpu_facts, finish_run, kv_tokens, run_method
from qualify.perf.gpu_info import read_clocks
from qualify.perf.metrics import METRICS
from qualify.perf.spec import Cell, ServingStream, ShapeSet, WorkRequest, WorkResult
from qualify.serve.dispatch_log import cartridge_positions, dispatch_log_in, read_dispatch_log
from qualify.serve.engine import (
    build_llm,
    cudagraph_mode,
    kv_capacity,
    prompt_token_ids,
    random_cartridge_file,
    random_questions,
    sampling_params,
    startup_phases,
)
from qualify.serve.gc_pauses import gc_pauses
from qualify.serve.layouts import layout as get_layout
from qualify.serve.settings import EngineSettings
from qualify.serve.stream import StreamSpec, serve_stream, stream_metrics

STREAM_METRICS = tuple(name for name, m in METRICS.items() if m.phase == "serving")


def _prompts(
    lay: Any, suffix: int, vocab: int, rng: random.Random, cartridge_len: int, placeholder: int
) -> Iterator[dict[str, list[int]]]:
    """Fresh questions, one prompt at a time, as vLLM's token prompts (a TokensPrompt is this dict)."""
    while True:
        questions = random_questions(1, suffix, vocab, rng, placeholder)
        yield {"prompt_token_ids": prompt_token_ids(lay, questions, cartridge_len, placeholder)[0]}


def scheduler_running(engine: Any) -> Callable[[], int] | None:
    """How many requests vLLM's scheduler runs now, read from an in-process engine core (``LLMEngine.engine_core``
    is then an ``InprocClient`` holding the ``EngineCore``); None where the core runs in another process."""
    core = getattr(getattr(engine, "engine_core", None), "engine_core", None)
    scheduler = getattr(core, "scheduler", None)
    if not isinstance(getattr(scheduler, "running", None), list):
        return None
    return lambda: len(scheduler.running)  # read each time: the scheduler may rebind its list


def _stream_kind(shape: ShapeSet, stream: ServingStream | None) -> tuple[int, float | None, str]:
    """(requests, Poisson rate or None, request-id prefix) of a named stream, or of the shape's one stream."""
    if stream is None:
        return int(shape.stream_requests or 0), shape.arrival_rate_per_s, ""
    return stream.requests, stream.arrival_rate_per_s, f"{stream.id}-"


def _serve_cell(
    engine: Any, lay: Any, kind: tuple[int, float | None, str], timing: Any, log: Path, prompts: Iterator,
    params: Any, clients: int, suffix: int, shared_once: int, seed: int,
) -> tuple[list[dict[str, float]], list[int], str]:  # fmt: skip
    """Warm-up streams, then the timed ones: (their metrics, the least cartridge positions cached in each, label)."""
    requests, rate, prefix = kind
    runs, cached, label = [], [], ""
    for rep in range(timing.warmups + timing.repetitions):
        spec = StreamSpec(requests, clients, rate, seed=seed * 1000 + rep)
        label = spec.label
        before = len(cartridge_positions(log))
        with gc_pauses() as pauses:
            run = serve_stream(engine, prompts, params, spec, request_prefix=f"{prefix}s{suffix}c{clients}r{rep}",
                               running=scheduler_running(engine))  # fmt: skip
        hits = cartridge_positions(log)[before:]
        if rep < timing.warmups:
            continue
        check_cartridge_shared(lay, spec.requests, hits, shared_once)
        runs.append({**stream_metrics(run), "gc_pause_ms": pauses.pause_s * 1e3})
        cached.append(min(hits) if hits else 0)
    return runs, cached, label


def measure(request: WorkRequest) -> WorkResult:
    started = time.perf_counter()
    shape = request.shape_set()
    timing = request.timing_config()
    settings = shape.engine or EngineSettings()
    if (shape.stream_requests is None and not shape.streams) or settings.kv_cache_memory_bytes is None:
        raise ValueError(
            "the serving set needs shape.stream_requests (or shape.streams) and shape.engine.kv_cache_memory_bytes"
        )
    lay = get_layout(request.implementation)
    gen = shape.generated_tokens
    vocab = int(settings.hf_config()["vocab_size"])
    rng = random.Random(request.seed)
    clocks_before = read_clocks()
    with tempfile.TemporaryDirectory(prefix="qualify-serving-") as tmp, dispatch_log_in(Path(tmp)) as log:
        cartridge = random_cartridge_file(settings, shape.cartridge_len, request.seed)
        t0 = time.perf_counter()
        with startup_phases() as phases:
            llm = build_llm(lay, cartridge, shape.cartridge_len, settings, seed=request.seed)
        startup_s = time.perf_counter() - t0
        capacity = kv_capacity(llm)
        params = sampling_params(gen)
        graphs = cudagraph_mode(llm)
        method = run_method("vllm LLMEngine request stream", settings, graphs)
        cells: list[Cell] = []
        for suffix in shape.suffixes:
            own, shared_once = kv_tokens(lay, shape.cartridge_len, suffix + gen, capacity["block_size"])
            fit = (capacity["tokens"] - shared_once) // own
            for clients, stream in ((c, st) for c in shape.batches for st in shape.serving_streams()):
                prompts = _prompts(lay, suffix, vocab, rng, shape.cartridge_len, settings.placeholder_token_id)
                kind = _stream_kind(shape, stream)
                runs, cached, label = _serve_cell(llm.llm_engine, lay, kind, timing, log, prompts, params, clients,
                                                  suffix, shared_once, request.seed)  # fmt: skip
                detail = {
                    "stream": label,
                    "warmup_streams": timing.warmups,
                    "kv_cache_memory_bytes": settings.kv_cache_memory_bytes,
                    "kv_capacity_tokens": capacity["tokens"],
                    "kv_tokens_per_request": own,
                    "kv_tokens_shared": shared_once,
                    "requests_that_fit": fit,
                    "admitted_concurrency": min(settings.max_num_seqs, fit, clients),
                    "peak_in_engine": [r["peak_in_engine"] for r in runs],
                    # measured: the most and the mean (per step) requests vLLM's scheduler ran in each timed stream
                    "scheduler_running_peak": [r["scheduler_running_peak"] for r in runs],
                    "scheduler_running_mean": [r["scheduler_running_mean"] for r in runs],
                    # a stall inside a timed stream: its longest engine step, and when it began (s into the stream)
                    "longest_step_ms": [r["longest_step_ms"] for r in runs],
                    "longest_step_at_s": [r["longest_step_at_s"] for r in runs],
                    # the Python collector's pauses inside each timed stream (the engine core runs in this process)
                    "gc_pause_ms": [r["gc_pause_ms"] for r in runs],
                    "cartridge_positions_cached": cached,
                    **{m: [r[m] for r in runs] for m in STREAM_METRICS},
                }
                step_ms = [1e3 * kind[0] / r["completed_requests_per_s"] for r in runs]
                cells += [
                    Cell(metric=m, batch=clients, suffix=suffix, stream=stream.id if stream else None,
                         live=suffix + gen, samples=[r[m] for r in runs], step_ms=step_ms, bytes_moved=0,
                         method=method, detail=detail)
                    for m in request.metrics
                    if m in STREAM_METRICS
                ]  # fmt: skip
        launched = read_dispatch_log(log)
        for c in cells:
            c.detail["specializations"] = launched
        gpu = engine_gpu_facts(capacity, startup_s, phases, graphs, log)
        if gpu["cudagraph_mode"] != graphs:
            method = run_method("vllm LLMEngine request stream", settings, gpu["cudagraph_mode"])
            cells = [c.model_copy(update={"method": method}) for c in cells]
    peak = statistics.median(cells[0].detail["peak_in_engine"]) if cells else 0
    notes = [f"layout {lay.name}: {lay.description}", f"equal KV memory: {settings.kv_cache_memory_bytes} bytes",
             f"median peak of requests in the engine, first cell: {peak}"]  # fmt: skip
    return finish_run(request, cells, gpu, clocks_before, started, notes, f"serving-{lay.name}")
