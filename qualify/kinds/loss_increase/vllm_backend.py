"""`backend: vllm` of `loss_increase`: the answer-token loss through the serving path, one vLLM process per layout.

Each layout's scores come from `qualify serve-loss score` in a fresh process, several at once
(`qualify.serve.score_processes`), as vLLM's prompt log-probabilities of every eval item behind the cartridge
(`qualify.serve.prompt_scores`).
What serves each layout:

* the BF16 reference: per-request injection of the cartridge as stored (`bf16-inject`, FA3);
* K16/V16 and K16/V8: the shared cartridge through the fused kernel (`shared-k16v16`, `shared-k16v8`), the path
  that ships; K16/V8 keeps its values as the serving store quantizes them (per-head scale);
* FP8 and FP4 keys, which have no serving path: injection of the cartridge fake-quantized by `qualify.quant.apply`
  with the gate's `scaling`, as the CPU backend quantizes.

The result is the CPU backend's `LayoutComparison`, so checks, measurements and tables are the same code; the KL
is the coarsened lower bound of `prompt_scores` (vLLM returns the top-k, not the full distribution), so a positive
control decided on it is conservative.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qualify.cartridge.types import Cartridge
from qualify.loss.evaluate import ItemArrays, LayoutComparison, LayoutItemScores, ReferenceResult, layout_result
from qualify.quant.apply import apply_layout
from qualify.quant.fp8 import Scaling
from qualify.quant.layouts import Layout
from qualify.serve.score_processes import SERVED_SCALING, ScoringInputs, score_runs
from qualify.serve.scoring_runs import REFERENCE_RUN, SERVED_RUNS
from qualify.stats.bootstrap import bootstrap_indices


@dataclass(frozen=True)
class ServedComparison:
    comparison: LayoutComparison
    runs: list[dict[str, Any]]  # per scoring process, in order (the reference first): how it was served
    meanwhile: Any  # what the `meanwhile` callable returned


def _run_facts(doc: dict[str, Any]) -> dict[str, Any]:
    keys = ("label", "layout", "fake_quant", "enforce_eager", "cartridge_sha256", "top_k", "engines_at_once")
    return {**{k: doc.get(k) for k in keys}, **doc.get("process", {})}


def evaluate_layouts_vllm(
    *, model_dir: Path, cartridge_path: Path, cartridge: Cartridge, eval_path: Path, layouts: Sequence[Layout | str],
    scaling: Scaling | str, n_resamples: int, confidence: float, seed: int, timeout_s: float,
    store: dict[tuple[str, ...], dict[str, Any]], engines_at_once: int,
    progress: Callable[[int, int], None] | None = None, meanwhile: Callable[[], Any] | None = None,
) -> ServedComparison:  # fmt: skip
    """Every layout against the BF16 reference from the serving path's scores (`score_processes.score_runs`: the
    run's store first, else several processes at once), and what `meanwhile` returned while they ran."""
    from qualify.serve.prompt_scores import paired_scores

    scaling = Scaling.parse(scaling)
    parsed = [Layout.parse(x) for x in layouts]
    runs = [REFERENCE_RUN, *(SERVED_RUNS[x] for x in parsed)]
    inputs = ScoringInputs(model_dir=model_dir, cartridge=cartridge_path, eval_set=eval_path, scaling=scaling)
    docs, extra = score_runs(runs, inputs, store=store, engines_at_once=engines_at_once, timeout_s=timeout_s,
                             progress=progress, meanwhile=meanwhile)  # fmt: skip
    reference, scored = docs[0], docs[1:]
    paired = [paired_scores(reference, doc) for doc in scored]
    first = paired[0] if paired else paired_scores(reference, reference)
    n_tokens = int(first.tokens.sum())
    indices = bootstrap_indices(len(first.ids), np.random.default_rng(seed), n_resamples)
    # What each served cartridge holds: K16/V8 as the serving store quantizes V (per head), the rest as
    # fake-quantized with the gate's scaling.
    stats = [apply_layout(cartridge, x, SERVED_SCALING.get(x, scaling))[1] for x in parsed]
    results = [
        layout_result(st, p.nll, p.reference_nll, p.kl, p.top1, n_tokens, indices, confidence)
        for p, st in zip(paired, stats, strict=True)
    ]
    comparison = LayoutComparison(
        reference=ReferenceResult(
            loss=float(first.reference_nll.sum() / n_tokens), n_items=len(first.ids), n_tokens=n_tokens
        ),
        layouts=tuple(results),
        items=ItemArrays(
            ids=first.ids,
            tokens=first.tokens,
            reference_nll=first.reference_nll,
            by_layout=tuple(
                LayoutItemScores(layout=x, nll=p.nll, kl=p.kl, top1_matches=p.top1)
                for x, p in zip(parsed, paired, strict=True)
            ),
        ),
        quant_stats=tuple(stats),
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
    )
    return ServedComparison(comparison, [_run_facts(d) for d in docs], extra)
