"""The `engine` implementation set: vLLM serving a cartridge, one fresh process per layout.

Each worker builds one engine (`qualify.serve.engine.build_llm`) for its layout over the shape set's model
(`shape.engine.model_dir`, by default the Qwen3-8B architecture with dummy weights), in vLLM's default mode
(torch.compile + CUDA graphs) unless the shape's engine settings say eager, then for every (suffix, batch) cell
sends `batch` prompts at once (`suffix` question tokens after the cartridge, as token ids), `warmups` untimed
batches of exactly that shape, then `repetitions` timed ones. Samples per repetition: output tokens/s of the
batch and the median / p95 of its requests' TTFT (vLLM's request metrics). Fresh questions per batch, so
nothing but the cartridge is ever reused; a prefix-cached layout must show its cartridge blocks served from the
cache in every timed batch (the inject connector logs what the cache held for each request), or the worker fails:
it would be measuring per-request injection under another name.

With ``QUALIFY_ENGINE_RUNS_DIR`` set, each worker also writes its result there as ``<layout>.p<process>.json``.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from qualify.perf.gpu_info import device_facts, read_clocks, versions
from qualify.perf.spec import Cell, WorkRequest, WorkResult
from qualify.serve.config import Mode
from qualify.serve.dispatch_log import (
    cartridge_positions,
    direct_launches_seen,
    dispatch_log_in,
    read_dispatch_log,
    read_dispatch_notes,
)
from qualify.serve.engine import (
    BatchTiming,
    build_llm,
    cudagraph_mode,
    kv_capacity,
    prompt_token_ids,
    random_cartridge_file,
    random_questions,
    run_batch,
    startup_phases,
)
from qualify.serve.host_speed import probe_host_speed
from qualify.serve.layouts import ServingLayout
from qualify.serve.layouts import layout as get_layout
from qualify.serve.settings import EngineSettings

RUNS_DIR_ENV = "QUALIFY_ENGINE_RUNS_DIR"


def kv_tokens(lay: ServingLayout, cartridge_len: int, prompt_and_output: int, block_size: int) -> tuple[int, int]:
    """(KV tokens one request holds on its own, KV tokens held once for every request) in whole blocks.

    `prompt_and_output` counts the request's own tokens (question and generated). Per-request injection holds
    the cartridge in every request's pages; a prefix-cached layout shares the cartridge's full blocks and holds
    only the partial last one per request; the shared layouts keep the cartridge outside the paged cache.
    """
    if lay.mode is Mode.SHARED:
        return -(-prompt_and_output // block_size) * block_size, 0
    blocks = -(-(cartridge_len + prompt_and_output) // block_size)
    shared = cartridge_len // block_size if lay.prefix_caching else 0
    return (blocks - shared) * block_size, shared * block_size


def check_cartridge_shared(lay: ServingLayout, requests: int, cached: list[int], want: int) -> None:
    """A prefix-cached layout must have found the cartridge's `want` positions (its full blocks) in vLLM's prefix
    cache for each of the `requests` it timed; otherwise it measured per-request injection under another name."""
    if not lay.prefix_caching:
        return
    if len(cached) < requests or min(cached) < want:
        seen = f"{min(cached)} cartridge positions" if cached else "no cartridge prompt"
        raise RuntimeError(
            f"layout {lay.name}: of {requests} timed requests the connector saw {len(cached)} cartridge prompts, the "
            f"least cached with {seen} from the prefix cache, not the cartridge's {want} in full blocks: the "
            "cartridge was not shared, so this is not the prefix-cached baseline"
        )


def run_method(how: str, settings: EngineSettings, graphs: str) -> str:
    """A cell's method: how it was served and in which execution mode."""
    return f"{how}, {'eager' if settings.enforce_eager else f'CUDA graphs ({graphs})'}"


def engine_gpu_facts(
    capacity: dict[str, Any], startup_s: float, phases: list[str], requested_mode: str, log: Path
) -> dict[str, Any]:
    """The engine's facts for a result: KV cache, start-up time and its phases, the CUDA-graph mode (the one the
    fused backend read inside the engine core where it reported one), whether the fused backend launched directly,
    device and memory in use."""
    resolved = read_dispatch_notes(log).get("cudagraph_mode")
    gpu: dict[str, Any] = {
        "kv_cache": capacity,
        "engine_startup_s": startup_s,
        "startup_phases": phases,  # where the start-up time went, in vLLM's own words
        "cudagraph_mode": ", ".join(resolved) if resolved else requested_mode,
        "fused_direct_launches": direct_launches_seen(log),
    }
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        # Device-wide (the engine preallocates its KV cache up to gpu_memory_utilization or kv_cache_memory_bytes).
        gpu.update(device_facts(), device_memory_used_bytes=int(total - free))
    return gpu


def finish_run(
    request: WorkRequest, cells: list[Cell], gpu: dict[str, Any], clocks_before: Any, started: float,
    notes: list[str], file_stem: str,
) -> WorkResult:  # fmt: skip
    """The worker's result; with ``QUALIFY_ENGINE_RUNS_DIR`` set, also written there as ``<stem>.p<process>.json``."""
    import vllm

    result = WorkResult(
        implementation_set=request.implementation_set,
        implementation=request.implementation,
        options=request.options,
        process=request.process,
        cells=cells,
        gpu=gpu,
        clocks={"before": clocks_before, "after": read_clocks()},
        versions={**versions(), "vllm": vllm.__version__},
        wall_s=time.perf_counter() - started,
        notes=notes,
    )
    runs_dir = os.environ.get(RUNS_DIR_ENV)
    if runs_dir:
        Path(runs_dir).mkdir(parents=True, exist_ok=True)
        (Path(runs_dir) / f"{file_stem}.p{request.process}.json").write_text(result.model_dump_json(indent=1))
    return result


def _cells(
    metrics: list[str], batch: int, suffix: int, live: int, runs: list[BatchTiming], detail: dict[str, Any],
    method: str,
) -> list[Cell]:  # fmt: skip
    values = {
        "output_tokens_per_s": [r.output_tokens_per_s for r in runs],
        "ttft_p50_ms": [r.ttft_quantile_ms(0.5) for r in runs],
        "ttft_p95_ms": [r.ttft_quantile_ms(0.95) for r in runs],
    }
    return [
        Cell(
            metric=m,  # type: ignore[arg-type]
            batch=batch,
            suffix=suffix,
            live=live,
            samples=values[m],
            step_ms=[r.wall_s * 1e3 for r in runs],
            bytes_moved=0,
            method=method,
            detail=detail,
        )
        for m in metrics
        if m in values
    ]


def measure(request: WorkRequest) -> WorkResult:
    started = time.perf_counter()
    shape = request.shape_set()
    timing = request.timing_config()
    settings = shape.engine or EngineSettings()
    lay = get_layout(request.implementation)
    gen = shape.generated_tokens
    vocab = int(settings.hf_config()["vocab_size"])
    rng = random.Random(request.seed)
    notes = [
        f"layout {lay.name}: {lay.description}",
        f"model {settings.model_dir} with load_format={settings.load_format}: timing is valid for this architecture, "
        "output quality is not"
        if settings.load_format in ("dummy", "qualify_seeded")
        else f"model {settings.model_dir}",
    ]
    if lay.mode is Mode.SHARED and lay.live_value_dtype == "fp8_e4m3":
        notes.append("live pages K16/V8: V in D FP8 bytes, a page 3/4 of a BF16 one (the KV capacity below counts it)")
    clocks_before = read_clocks()
    with tempfile.TemporaryDirectory(prefix="qualify-engine-") as tmp, dispatch_log_in(Path(tmp)) as log:
        cartridge = random_cartridge_file(settings, shape.cartridge_len, request.seed)
        t0 = time.perf_counter()
        with startup_phases() as phases:
            llm = build_llm(lay, cartridge, shape.cartridge_len, settings, seed=request.seed)
        startup_s = time.perf_counter() - t0
        capacity = kv_capacity(llm)
        graphs = cudagraph_mode(llm)  # as requested; the engine core may resolve another (read back below)
        method = run_method("vllm LLM.generate", settings, graphs)
        cells: list[Cell] = []
        for suffix in shape.suffixes:
            own, shared_once = kv_tokens(lay, shape.cartridge_len, suffix + gen, capacity["block_size"])
            for batch in shape.batches:

                def prompts(batch: int = batch, suffix: int = suffix) -> list[list[int]]:
                    questions = random_questions(batch, suffix, vocab, rng, settings.placeholder_token_id)
                    return prompt_token_ids(lay, questions, shape.cartridge_len, settings.placeholder_token_id)

                for _ in range(timing.warmups):
                    run_batch(llm, prompts(), gen)
                runs, cached, hosts = [], [], []
                for _ in range(timing.repetitions):
                    seen = len(cartridge_positions(log))
                    batch_prompts = prompts()
                    hosts.append(probe_host_speed())  # outside the timed wall
                    runs.append(run_batch(llm, batch_prompts, gen))
                    hits = cartridge_positions(log)[seen:]
                    check_cartridge_shared(lay, batch, hits, shared_once)
                    cached.append(min(hits) if hits else 0)
                fit = (capacity["tokens"] - shared_once) // own
                detail = {
                    "requests_per_s": [r.requests_per_s for r in runs],
                    "ttft_p50_ms": [r.ttft_quantile_ms(0.5) for r in runs],
                    "ttft_p95_ms": [r.ttft_quantile_ms(0.95) for r in runs],
                    "wall_ms": [r.wall_s * 1e3 for r in runs],
                    # the Python collector's pauses inside each timed batch (the engine core runs in this process)
                    "gc_pause_ms": [r.gc.pause_s * 1e3 for r in runs],
                    "gc_full_collections": [r.gc.collections[2] for r in runs],
                    # the host's speed just before each timed batch (qualify.serve.host_speed) and the CPU it ran on
                    "host_probe_us": [h.probe_us for h in hosts],
                    "host_cpu": [h.cpu for h in hosts],
                    "prompt_tokens_per_request": (shape.cartridge_len if lay.mode is Mode.INJECT else 0) + suffix,
                    # per repetition, the least of its requests: cartridge positions from vLLM's prefix cache
                    "cartridge_positions_cached": cached,
                    "kv_tokens_per_request": own,
                    "kv_tokens_shared": shared_once,
                    "kv_capacity_tokens": capacity["tokens"],
                    "requests_that_fit": fit,
                    "admitted_concurrency": min(settings.max_num_seqs, fit),
                }
                cells += _cells(list(request.metrics), batch, suffix, suffix + gen, runs, detail, method)
        # Every variant the engine launched while this worker ran (start-up profiling and warm-ups included), as
        # the backend read it from the kernel's plans; none for a layout that does not use the fused kernel.
        launched = read_dispatch_log(log)
        for c in cells:
            c.detail["specializations"] = launched
        # The fused backend reports the mode vLLM resolved inside the engine core; other layouts keep the request.
        gpu = engine_gpu_facts(capacity, startup_s, phases, graphs, log)
        if gpu["cudagraph_mode"] != graphs:
            method = run_method("vllm LLM.generate", settings, gpu["cudagraph_mode"])
            cells = [c.model_copy(update={"method": method}) for c in cells]
    return finish_run(request, cells, gpu, clocks_before, started, notes, lay.name)
