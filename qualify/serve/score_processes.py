"""Serving-path scores of several layouts, each from `qualify serve-loss score` in its own process, several at once.

Each layout is scored in a fresh process because vLLM engines do not share a process cleanly. Several run at once
because an engine's start-up (import, torch.compile, graph capture: 40-100 s on the H200) dwarfs scoring a small
eval set: the loss gate of three checkpoints starts 18 engines. Running them side by side changes no score: each
process serves the same requests in the same batches on its own engine, and none is timed. They fit side by side
because every scoring engine gets a fixed KV cache (`kv_cache_memory_bytes`, `qualify.serve.e2e.real_model_settings`),
so vLLM sizes nothing from free memory; its `gpu_memory_utilization` is then only a start-up check that that share
of the GPU is free, and with `engines_at_once` engines the share is `SHARE_OF_ALL / engines_at_once`.

Scores are kept for the whole qualify run in a store (`ctx.memo(SCORES_MEMO, dict)`), keyed by what was served:
the loss and accuracy gates of one run then share one engine per layout and cartridge.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.errors import QualifyError
from qualify.hashing import sha256_file
from qualify.quant.fp8 import Scaling
from qualify.quant.layouts import Layout
from qualify.serve.scoring_runs import ScoringRun

SCORES_MEMO = ("serve-scores",)
# What the engines side by side may together ask vLLM's start-up check for (the rest: the CUDA contexts, the
# caller's own process).
SHARE_OF_ALL = 0.9
_ERROR_TAIL_LINES = 12


# Layouts the serving path quantizes itself, and how (qualify.serve.store: FP8 cartridge V with a per-head scale).
SERVED_SCALING: dict[Layout, Scaling] = {Layout.K16_V8: Scaling.PER_HEAD}


@dataclass(frozen=True)
class ScoringInputs:
    """What every run of one call serves: the model's folder, the cartridge, the eval set and the scaling of the
    fake quantization."""

    model_dir: Path
    cartridge: Path
    eval_set: Path
    scaling: Scaling


def memo_key(run: ScoringRun, inputs: ScoringInputs) -> tuple[str, ...]:
    """What the scores depend on. The scaling only for fake-quantized runs: the serving store quantizes its own."""
    return (str(inputs.model_dir.resolve()), sha256_file(inputs.cartridge), sha256_file(inputs.eval_set),
            run.layout, run.fake_quant or "", inputs.scaling.value if run.fake_quant else "")  # fmt: skip


def scoring_command(run: ScoringRun, inputs: ScoringInputs, out: Path, memory_share: float) -> list[str]:
    return [sys.executable, "-m", "qualify.cli", "serve-loss", "score", "--layout", run.layout, "--out", str(out),
            "--model-dir", str(inputs.model_dir), "--cartridge", str(inputs.cartridge), "--eval-set",
            str(inputs.eval_set), "--scaling", inputs.scaling.value, "--gpu-memory-utilization", f"{memory_share:.4f}",
            *(["--fake-quant", run.fake_quant] if run.fake_quant else [])]  # fmt: skip


def _what(run: ScoringRun) -> str:
    return f"serving-path scores of {run.layout}{f' ({run.fake_quant} fake-quantized)' if run.fake_quant else ''}"


@dataclass(frozen=True)
class ServedProcess:
    """One engine process that writes one JSON document: what it is (for errors), a file stem, and its command
    line given the output path and the share of GPU memory its engine may ask for."""

    what: str
    stem: str
    command: Callable[[Path, float], list[str]]


def _run_one(job: ServedProcess, tmp: Path, memory_share: float, timeout_s: float) -> dict:
    """The process's document; QualifyError naming it, with the tail of its output, on any failure."""
    out, log = tmp / f"{job.stem}.json", tmp / f"{job.stem}.log"
    began = time.perf_counter()
    with log.open("w") as sink:
        try:
            proc = subprocess.run(job.command(out, memory_share), stdout=sink, stderr=subprocess.STDOUT,
                                  timeout=timeout_s, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise QualifyError(f"{job.what}: no result within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-_ERROR_TAIL_LINES:])
        raise QualifyError(f"{job.what}: the process exited {proc.returncode}:\n{tail}")
    if not out.is_file():
        raise QualifyError(f"{job.what}: the process exited 0 but wrote no {out.name}")
    doc = json.loads(out.read_text())
    doc["process"] = {"wall_s": round(time.perf_counter() - began, 1), "gpu_memory_utilization": memory_share}
    return doc


def run_side_by_side(
    jobs: dict[tuple[str, ...], ServedProcess], *, store: dict[tuple[str, ...], dict[str, Any]], engines_at_once: int,
    timeout_s: float, progress: Callable[[int, int], None] | None = None, meanwhile: Callable[[], Any] | None = None,
) -> Any:  # fmt: skip
    """Run every job whose key the store lacks, at most `engines_at_once` at a time, each asking vLLM for an equal
    share of SHARE_OF_ALL, and store its document. `meanwhile` runs in this process while they work; its result is
    returned. The first failure's QualifyError is raised after every started process has ended; the jobs that
    succeeded are stored."""
    if engines_at_once < 1:
        raise ValueError(f"engines_at_once must be >= 1, got {engines_at_once}")
    missing = [k for k in jobs if k not in store]

    def report() -> None:
        if progress is not None:
            progress(sum(1 for k in jobs if k in store), len(jobs))

    report()
    share = SHARE_OF_ALL / min(engines_at_once, max(len(missing), 1))
    errors: list[QualifyError] = []
    with tempfile.TemporaryDirectory(prefix="qualify-served-") as tmp, \
            ThreadPoolExecutor(max_workers=engines_at_once) as pool:  # fmt: skip
        futures = {k: pool.submit(_run_one, jobs[k], Path(tmp), share, timeout_s) for k in missing}
        extra = meanwhile() if meanwhile is not None else None
        for key, future in futures.items():
            try:
                store[key] = {**future.result(), "engines_at_once": engines_at_once}
            except QualifyError as exc:
                errors.append(exc)
            report()
    if errors:
        raise errors[0]
    return extra


def score_runs(
    runs: Sequence[ScoringRun], inputs: ScoringInputs, *, store: dict[tuple[str, ...], dict[str, Any]],
    engines_at_once: int, timeout_s: float, progress: Callable[[int, int], None] | None = None,
    meanwhile: Callable[[], Any] | None = None,
) -> tuple[list[dict[str, Any]], Any]:  # fmt: skip
    """Every run's score document, in `runs`' order: from the store, else scored (`run_side_by_side`) and stored,
    and what `meanwhile` returned (a CPU evaluation made while the engines work)."""
    keys = [memo_key(r, inputs) for r in runs]

    def job(run: ScoringRun) -> ServedProcess:
        stem = run.label.replace("/", "").replace("+", "-")
        return ServedProcess(_what(run), stem, lambda out, share: scoring_command(run, inputs, out, share))

    jobs = {k: job(r) for k, r in zip(keys, runs, strict=True)}
    extra = run_side_by_side(jobs, store=store, engines_at_once=engines_at_once, timeout_s=timeout_s,
                             progress=progress, meanwhile=meanwhile)  # fmt: skip
    return [store[k] for k in keys], extra
