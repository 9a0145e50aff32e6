"""`backend: served` of `accuracy_floor`: the eval set's yes/no questions answered behind the cartridge by the
serving path, each layout in its own vLLM process (`qualify.serve.score_processes`).

The scores are the prompt log-probabilities `qualify serve-loss score` writes, read from the run's store when a
`loss_increase` gate (backend vllm) of the same model, cartridge and eval set already served them, so the floor
costs no engine of its own; otherwise the missing layouts are scored here. An item is answered by comparing its
gold answer token with the other answer's (`qualify.serve.yes_no`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.compile import GateItem
from qualify.context import RunContext
from qualify.errors import DataError
from qualify.hashing import sha256_file
from qualify.kinds.accuracy_floor.params import AccuracyFloorParams
from qualify.loss.data import load_eval_set
from qualify.models.spec import PathSpec, PypiGgufSpec
from qualify.quant.fp8 import Scaling
from qualify.quant.layouts import Layout
from qualify.results import InputRef
from qualify.serve.score_processes import SCORES_MEMO, ScoringInputs, score_runs
from qualify.serve.scoring_runs import REFERENCE_RUN, SERVED_RUNS, ScoringRun
from qualify.serve.yes_no import PREFIX, YesNoOutcomes, yes_no_outcomes

# The reference's name in scores and tables: the BF16 cartridge served by per-request injection (FA3). Its layout
# is K16/V16 (`reference_layout`), but so is the shared path's K16/V16 cell, which is a candidate here.
REFERENCE_NAME = "BF16 (injection)"


@dataclass(frozen=True)
class ServedAnswers:
    """Per layout, and for the reference under REFERENCE_NAME: the paired outcomes, and how each was served."""

    outcomes: dict[str, YesNoOutcomes]
    runs: dict[str, dict[str, Any]]
    inputs: list[InputRef]


def served_answers(
    item: GateItem, params: AccuracyFloorParams, ctx: RunContext, spec: PypiGgufSpec | PathSpec, model_dir: Path,
    layouts: list[str],
) -> ServedAnswers:  # fmt: skip
    """The reference's (under REFERENCE_NAME) and `layouts`' answers to the workload's yes/no items behind
    `params.checkpoint`."""
    workload = item.gate_file.workloads[params.workload]
    if workload.eval_set is None or params.checkpoint is None:
        raise DataError(item.gate_file.path, f"{item.name}: backend served needs a checkpoint and the eval_set")
    cartridge = item.gate_file.resolve(workload.cartridges[params.checkpoint])
    eval_path = item.gate_file.resolve(workload.eval_set)
    items = ctx.memo(("eval-set", str(eval_path)), lambda: load_eval_set(eval_path)).items
    asked = [i for i in items if i.id.startswith(PREFIX)]
    if params.task.n is not None and params.task.n != len(asked):
        raise DataError(
            str(eval_path),
            f"{item.name}: task.n is {params.task.n} but the eval set has {len(asked)} yes/no items ({PREFIX}*); "
            "the power check must be made on the items that are answered",
        )
    names = [REFERENCE_NAME, *dict.fromkeys(layouts)]
    runs: list[ScoringRun] = [REFERENCE_RUN, *(SERVED_RUNS[Layout.parse(x)] for x in names[1:])]
    inputs = ScoringInputs(model_dir=model_dir, cartridge=cartridge, eval_set=eval_path,
                           scaling=Scaling.parse(params.scaling))  # fmt: skip

    def progress(done: int, total: int) -> None:
        ctx.progress("layouts in vLLM", done, total)

    docs, _ = score_runs(runs, inputs, store=ctx.memo(SCORES_MEMO, dict), engines_at_once=params.engines_at_once,
                         timeout_s=params.worker_timeout_s, progress=progress)  # fmt: skip
    outcomes = {name: yes_no_outcomes(doc, items) for name, doc in zip(names, docs, strict=True)}
    served = {
        name: {"served_as": run.label, "undecided": outcomes[name].undecided, "enforce_eager": doc.get("enforce_eager"),
               "top_k": doc.get("top_k"), "cartridge_sha256": doc.get("cartridge_sha256"),
               "engines_at_once": doc.get("engines_at_once"), **doc.get("process", {})}
        for name, run, doc in zip(names, runs, docs, strict=True)
    }  # fmt: skip
    refs = [
        InputRef(cartridge.name, str(cartridge), sha256_file(cartridge), "cartridge"),
        InputRef(eval_path.name, str(eval_path), sha256_file(eval_path), "eval-set"),
    ]
    return ServedAnswers(outcomes, served, refs)
