"""Run one lm-eval task with one model and keep each item's outcome, so layouts can be compared item by item."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from qualify.errors import QualifyError

if TYPE_CHECKING:
    from lm_eval.api.model import LM
    from lm_eval.api.task import Task
    from lm_eval.tasks import TaskManager

OFFLINE_TASKS_DIR = Path(__file__).with_name("lm_eval_tasks")
OFFLINE_TASKS = frozenset(p.stem for p in OFFLINE_TASKS_DIR.glob("*.yaml"))

# The per-item metric a task is scored by when the gate does not say: lm-eval metric name and filter.
DEFAULT_METRIC: dict[str, tuple[str, str]] = {
    "cq_mmlu": ("acc", "none"),
    "cq_gsm8k": ("exact_match", "flexible-extract"),
    "mmlu": ("acc", "none"),
    "gsm8k": ("exact_match", "strict-match"),
}


@dataclass(frozen=True)
class TaskRequest:
    """What to evaluate: an lm-eval task (or group), which items, and how to score each one."""

    name: str
    n: int | None = None  # items per leaf task, drawn without replacement; None: all
    sample_seed: int = 0
    num_fewshot: int | None = None  # None: the task's own default
    metric: str | None = None
    filter: str | None = None
    max_gen_toks: int | None = None

    @property
    def offline(self) -> bool:
        return self.name in OFFLINE_TASKS

    def scoring(self) -> tuple[str, str]:
        default = DEFAULT_METRIC.get(self.name, ("acc", "none"))
        return self.metric or default[0], self.filter or default[1]


@dataclass(frozen=True)
class TaskScores:
    """Per-item binary outcomes of one task under one model/layout; items are (leaf task, doc id) pairs."""

    task: str
    metric: str
    items: tuple[tuple[str, int], ...]
    correct: npt.NDArray[np.bool_]

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def score(self) -> float:
        return float(self.correct.mean()) if self.n else float("nan")


def select_items(n_docs: int, n: int | None, seed: int) -> list[int]:
    """`n` distinct doc indices drawn with `seed` (sorted), or all of them; the same for every layout."""
    if n is None or n >= n_docs:
        return list(range(n_docs))
    return sorted(int(i) for i in np.random.default_rng(seed).choice(n_docs, size=n, replace=False))


def task_manager(request: TaskRequest) -> TaskManager:
    """A TaskManager that knows the offline tasks; lm-eval's own (hub) tasks are indexed only when asked for."""
    if request.offline:
        # The offline tasks read local files only; make any accidental hub access fail fast instead of hanging.
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(OFFLINE_TASKS_DIR), include_defaults=not request.offline)


def load_tasks(request: TaskRequest, manager: TaskManager | None = None) -> dict[str, Task]:
    """The leaf tasks of `request.name` (a group such as `mmlu` expands to its subjects)."""
    manager = manager or task_manager(request)
    try:
        return dict(manager.load([request.name])["tasks"])
    except KeyError as exc:
        raise QualifyError(f"lm-eval knows no task {request.name!r}: {exc}") from None


def _metric_value(sample: dict[str, Any], metric: str) -> float:
    if metric not in sample:
        known = sorted(k for k, v in sample.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        raise QualifyError(f"lm-eval sample has no metric {metric!r} (numeric fields: {', '.join(known)})")
    return float(sample[metric])


def evaluate_task(lm: LM, request: TaskRequest, tasks: dict[str, Task] | None = None) -> TaskScores:
    """Evaluate `request` with `lm` and return every item's outcome (metric value 1 = correct)."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    tasks = tasks if tasks is not None else load_tasks(request)
    samples = {name: select_items(len(task.eval_docs), request.n, request.sample_seed) for name, task in tasks.items()}
    metric, filter_name = request.scoring()
    # lm-eval logs every request at INFO/WARNING; the gate report carries what matters.
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    results = simple_evaluate(
        model=lm,
        tasks=list(tasks.values()),
        num_fewshot=request.num_fewshot,
        samples=samples,
        log_samples=True,
        bootstrap_iters=0,
        gen_kwargs={"max_gen_toks": request.max_gen_toks} if request.max_gen_toks else None,
        random_seed=request.sample_seed,
        numpy_random_seed=request.sample_seed,
        torch_random_seed=request.sample_seed,
        fewshot_random_seed=request.sample_seed,
        # The tasks are already built; without a manager lm-eval would index its ~14k task YAMLs (~15 s) again.
        task_manager=TaskManager(include_path=str(OFFLINE_TASKS_DIR), include_defaults=False),
    )
    if results is None:
        raise QualifyError("lm-eval returned no results (not rank 0?)")
    items: list[tuple[str, int]] = []
    values: list[float] = []
    for name in sorted(tasks):
        logged = [s for s in results["samples"].get(name, []) if s.get("filter", "none") == filter_name]
        if len(logged) != len(samples[name]):
            filters = sorted({s.get("filter", "none") for s in results["samples"].get(name, [])})
            raise QualifyError(
                f"{name}: expected {len(samples[name])} scored items for filter {filter_name!r}, got {len(logged)} "
                f"(filters present: {', '.join(filters) or 'none'})"
            )
        for s in sorted(logged, key=lambda s: int(s["doc_id"])):
            items.append((name, int(s["doc_id"])))
            values.append(_metric_value(s, metric))
    label = metric if filter_name == "none" else f"{metric},{filter_name}"
    return TaskScores(request.name, label, tuple(items), np.asarray(values) >= 0.5)
