"""Fields and lint of `accuracy_floor`: a benchmark under a quantized KV layout keeps a fraction of its BF16 score.

Per task and layout (a matrix cell), the candidate layout's score must stay at or above each `floors` entry times
the reference layout's score, measured in the same run on the same items. The runner keeps per-item paired
outcomes and reports McNemar's exact test, a paired bootstrap CI of the score ratio and the power statement.

Measurements of each item: `AccuracyFloorMeasurements` (`measurements.py`); each floor is the threshold of its
check only.

`backend: served` answers the workload eval set's own yes/no questions (task `cartridge_yes_no`: the `boolq-` items,
a question about the cartridge's document) behind the cartridge of `checkpoint`, from the serving path's prompt
log-probabilities (`qualify.serve.yes_no`): the reference is the BF16 cartridge by per-request injection, the
layout its shared-path or fake-quantized serving (`qualify.serve.score_processes.SERVED_RUNS`). The scores come from
the run's store of serving-path scores, so a `loss_increase` gate with `backend: vllm` over the same model,
cartridge and eval set in the same run has already started every engine this gate needs.

`backend: vllm` serves the workload's model (its directory, or the GGUF's converted one) through lm-eval's `vllm`
model with the layout as vLLM's kv_cache_dtype, which holds keys and values alike: only K16/V16 and K8/V8 run there.
One engine is alive at a time (list `layout` before `task` in the matrix and each layout's engine starts once).
`vllm_args` passes further keyword arguments to that model: lm-eval's own, such as max_model_len, or vLLM engine
arguments, such as load_format, enforce_eager, gpu_memory_utilization.

The power check runs in `qualify lint` from n, alpha, beta and the task's `expected_reference_score`: a floor
finer than the smallest resolvable drop is an error unless `allow_underpowered: true`, and the report then marks
the item "underpowered" (a smoke test). See `qualify.stats.power` for the formula.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from qualify.quant.layouts import Layout, ServedLayoutName
from qualify.registry import LintIssue
from qualify.schema.models import KindParams, StrictModel
from qualify.stats.power import power_statement
from qualify.worker_groups import LM_EVAL_VLLM, SERVING

# Sizes of the offline tasks, so lint can check power for `n: null` (all items) without loading any data.
OFFLINE_TASK_SIZES = {"cq_gsm8k": 1319, "cq_mmlu": 14042}

VLLM_LAYOUTS = (Layout.K16_V16.value, Layout.K8_V8.value)
# Set by the gate itself, never through `vllm_args`: the layout (kv_cache_dtype), the model (pretrained, from the
# workload, with its dtype) and batch_size (the gate field).
VLLM_RESERVED_ARGS = frozenset({"pretrained", "model", "kv_cache_dtype", "dtype", "batch_size"})

VllmArg = bool | int | float | str
# backend served: the one task it answers (the eval set's yes/no items), and what it counts.
SERVED_TASK = "cartridge_yes_no"
SERVED_METRIC = "acc"


class TaskSpec(StrictModel):
    """One benchmark: an lm-eval task and how it is sampled and scored; usually a value of the `task` matrix axis."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    name: str  # lm-eval task: cq_mmlu / cq_gsm8k (offline) or any lm-eval task such as mmlu, gsm8k (hub)
    n: int | None = Field(default=None, ge=1)  # items per leaf task; None: all (offline tasks only, for lint)
    num_fewshot: int | None = Field(default=None, ge=0)
    metric: str | None = None  # lm-eval per-item metric; default per task (acc, exact_match)
    filter: str | None = None  # lm-eval filter name; default per task (none, flexible-extract, strict-match)
    max_gen_toks: int | None = Field(default=None, ge=1)
    expected_reference_score: float = Field(ge=0.0, le=1.0)  # what lint's power check assumes


class AccuracyFloorParams(KindParams):
    threshold_fields: ClassVar[dict[str, Any]] = {"floors": True}

    workload: str
    task: TaskSpec
    layout: ServedLayoutName
    reference_layout: ServedLayoutName = Layout.K16_V16.value
    # The "ordinary benchmarks" table shows these layouts beside the reference (each computed once per run).
    table_layouts: list[ServedLayoutName] = Field(default_factory=lambda: [Layout.K16_V8.value, Layout.K8_V8.value])
    floors: list[float] = Field(min_length=1)
    decision: Literal["point", "ci_lower"]
    alpha: float = Field(default=0.05, gt=0.0, lt=0.5)
    beta: float = Field(default=0.2, gt=0.0, lt=1.0)
    assumed_discordance: float | None = Field(default=None, ge=0.0, le=1.0)
    allow_underpowered: bool = False
    n_resamples: int = Field(default=2000, ge=200)
    sample_seed: int = 0
    scaling: Literal["none", "per_tensor", "per_head"] = "none"
    backend: Literal["hf", "vllm", "served"] = "hf"
    # backend vllm only: extra keyword arguments of lm-eval's vllm model / vLLM's engine (see the module docstring).
    vllm_args: dict[str, VllmArg] = Field(default_factory=dict)
    # backend served only: the workload's cartridge behind which the questions are asked (usually a matrix axis),
    # scoring processes side by side when the run's store lacks a layout, and each one's time limit.
    checkpoint: str | None = None
    engines_at_once: int = Field(default=1, ge=1, le=16)
    worker_timeout_s: float = Field(default=600.0, gt=0)
    batch_size: int = Field(default=8, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"


def planned_n(task: TaskSpec) -> int | None:
    """Items the run will score, as far as lint can know without loading the task."""
    size = OFFLINE_TASK_SIZES.get(task.name)
    if task.n is None:
        return size
    return min(task.n, size) if size is not None else task.n


def lint(params: KindParams, gate_file: object) -> list[LintIssue]:
    assert isinstance(params, AccuracyFloorParams)
    issues: list[LintIssue] = []
    workloads = getattr(gate_file, "workloads", {})
    if params.workload not in workloads:
        known = ", ".join(sorted(workloads)) or "none declared"
        issues.append(LintIssue(("workload",), f"unknown workload {params.workload!r} (known: {known})"))
    for i, floor in enumerate(params.floors):
        if not 0.0 < floor <= 1.0:
            issues.append(
                LintIssue(("floors", i), f"a floor is a fraction of the reference score in (0, 1], got {floor}")
            )
    issues.extend(_lint_vllm(params))
    issues.extend(_lint_served(params, workloads.get(params.workload)))
    n = planned_n(params.task)
    if n is None:
        issues.append(
            LintIssue(("task", "n"), f"task {params.task.name!r} is not an offline task: declare n for the power check")
        )
        return issues
    for i, floor in enumerate(params.floors):
        if not 0.0 < floor <= 1.0:
            continue
        power = power_statement(
            n, params.alpha, params.beta, params.task.expected_reference_score, floor, params.assumed_discordance
        )
        if power.underpowered and not params.allow_underpowered:
            issues.append(
                LintIssue(
                    ("floors", i),
                    f"floor {floor:g} on {params.task.id} is finer than the gate can resolve ({power.sentence()}); "
                    "raise n, declare a measured assumed_discordance, coarsen the floor, "
                    "or set allow_underpowered: true to run it as a smoke test",
                )
            )
    return issues


def _lint_vllm(params: AccuracyFloorParams) -> list[LintIssue]:
    if params.backend != "vllm":
        if params.vllm_args:
            return [LintIssue(("vllm_args",), "vllm_args apply to backend: vllm only; this gate runs backend: hf")]
        return []
    issues: list[LintIssue] = []
    uniform = " and ".join(VLLM_LAYOUTS)
    for field in ("layout", "reference_layout"):
        if getattr(params, field) not in VLLM_LAYOUTS:
            issues.append(
                LintIssue(
                    (field,),
                    f"{field} {getattr(params, field)}: vLLM's kv_cache_dtype sets K and V together: only {uniform} "
                    "run there; use backend: hf for mixed layouts",
                )
            )
    for i, layout in enumerate(params.table_layouts):
        if layout not in VLLM_LAYOUTS:
            issues.append(
                LintIssue(
                    ("table_layouts", i),
                    f"table layout {layout}: vLLM's kv_cache_dtype sets K and V together: only {uniform} run there "
                    "(the default table_layouts include K16/V8; set table_layouts: [K8/V8] or [])",
                )
            )
    if params.scaling != "none":
        issues.append(
            LintIssue(
                ("scaling",),
                f"scaling {params.scaling} is the hf backend's fake quantization; vLLM applies its own KV scales "
                "(the checkpoint's, else 1.0): use scaling: none with backend: vllm",
            )
        )
    for key in sorted(VLLM_RESERVED_ARGS & set(params.vllm_args)):
        issues.append(
            LintIssue(
                ("vllm_args", key),
                f"vllm_args may not set {key!r}: the gate sets it (kv_cache_dtype from the layout, the model and its "
                "dtype from the workload, batch_size from the gate field)",
            )
        )
    return issues


def _lint_served(params: AccuracyFloorParams, workload: Any) -> list[LintIssue]:
    if params.backend != "served":
        issues = []
        if params.checkpoint is not None:
            issues.append(LintIssue(("checkpoint",), "checkpoint applies to backend: served only"))
        if params.engines_at_once != 1:
            issues.append(LintIssue(("engines_at_once",), "engines_at_once applies to backend: served only"))
        if params.task.name == SERVED_TASK:
            issues.append(LintIssue(("task", "name"), f"task {SERVED_TASK} is answered by backend: served only"))
        return issues
    from qualify.serve.scoring_runs import SERVED_RUNS

    issues = []
    task = params.task
    if task.name != SERVED_TASK:
        issues.append(
            LintIssue(("task", "name"), f"backend served answers task {SERVED_TASK!r} only, not {task.name!r}")
        )
    for field in ("num_fewshot", "filter", "max_gen_toks"):
        if getattr(task, field) is not None:
            issues.append(LintIssue(("task", field), f"{field} does not apply to {SERVED_TASK} (one answer token)"))
    if task.metric not in (None, SERVED_METRIC):
        issues.append(LintIssue(("task", "metric"), f"{SERVED_TASK} counts {SERVED_METRIC!r} only"))
    if params.reference_layout != Layout.K16_V16.value:
        issues.append(
            LintIssue(
                ("reference_layout",),
                "backend served compares against the BF16 cartridge served by per-request injection: "
                f"reference_layout must be {Layout.K16_V16.value}",
            )
        )
    served = {x.value for x in SERVED_RUNS}
    for path, layout in [(("layout",), params.layout), *((("table_layouts", i), x) for i, x in
                                                         enumerate(params.table_layouts))]:  # fmt: skip
        if layout not in served:
            issues.append(LintIssue(path, f"layout {layout} has no serving run (known: {', '.join(sorted(served))})"))
    if params.vllm_args:
        issues.append(
            LintIssue(("vllm_args",), "vllm_args apply to backend: vllm only; backend served sets its engines")
        )
    if params.checkpoint is None:
        issues.append(LintIssue(("checkpoint",), "backend served needs the checkpoint whose cartridge answers"))
    elif workload is not None and params.checkpoint not in workload.cartridges:
        known = ", ".join(sorted(workload.cartridges)) or "none declared"
        issues.append(
            LintIssue(
                ("checkpoint",), f"workload {params.workload!r} has no cartridge {params.checkpoint!r} (known: {known})"
            )
        )
    if workload is not None and workload.eval_set is None:
        issues.append(LintIssue(("workload",), f"workload {params.workload!r} declares no eval_set (the questions)"))
    if params.device == "cpu":
        issues.append(LintIssue(("device",), "backend served serves on the GPU; drop device: cpu"))
    return issues


def worker_group(params: KindParams) -> str | None:
    """Backend `served` reads the loss gate's store of served scores; backend `vllm` reuses live engines."""
    assert isinstance(params, AccuracyFloorParams)
    return {"served": SERVING, "vllm": LM_EVAL_VLLM}.get(params.backend)
