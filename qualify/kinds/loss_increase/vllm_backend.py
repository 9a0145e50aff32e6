"""`backend: vllm` of `loss_increase`: the answer-token loss through the serving path, one vLLM process per layout.

Each layout's scores come from `qualify serve-loss score` in a fresh process (vLLM engines do not share a process
cleanly), as vLLM's prompt log-probabilities of every eval item behind the cartridge (`qualify.serve.prompt_scores`).
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

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from qualify.cartridge.types import Cartridge
from qualify.errors import QualifyError
from qualify.loss.evaluate import ItemArrays, LayoutComparison, LayoutItemScores, ReferenceResult, layout_result
from qualify.quant.apply import apply_layout
from qualify.quant.fp8 import Scaling
from qualify.quant.layouts import Layout
from qualify.stats.bootstrap import bootstrap_indices

REFERENCE: tuple[str, str | None] = ("bf16-inject", None)
# Each layout: (the serving layout, the layout the cartridge is fake-quantized to first, or None).
SERVED: dict[Layout, tuple[str, str | None]] = {
    Layout.K16_V16: ("shared-k16v16", None),
    Layout.K16_V8: ("shared-k16v8", None),
    Layout.K8_V16: ("bf16-inject", "K8/V16"),
    Layout.K8_V8: ("bf16-inject", "K8/V8"),
    Layout.K4_V16: ("bf16-inject", "K4/V16"),
}
# Layouts the serving path quantizes itself, and how (qualify.serve.store: FP8 cartridge V with a per-head scale).
SERVED_SCALING: dict[Layout, Scaling] = {Layout.K16_V8: Scaling.PER_HEAD}


def score_in_process(
    layout: str, fake_quant: str | None, *, model_dir: Path, cartridge: Path, eval_set: Path, scaling: Scaling,
    out: Path, timeout_s: float,
) -> dict:  # fmt: skip
    """One layout's scores from `qualify serve-loss score` in a fresh process (this environment, as the perf
    workers run: the project installed); QualifyError with its output."""
    cmd = [sys.executable, "-m", "qualify.cli", "serve-loss", "score", "--layout", layout, "--out", str(out),
           "--model-dir", str(model_dir), "--cartridge", str(cartridge), "--eval-set", str(eval_set),
           "--scaling", scaling.value, *(["--fake-quant", fake_quant] if fake_quant else [])]  # fmt: skip
    what = f"serving-path scores of {layout}{f' ({fake_quant} fake-quantized)' if fake_quant else ''}"
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise QualifyError(f"{what}: no result within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
        raise QualifyError(f"{what}: the scoring process exited {proc.returncode}:\n{tail}")
    if not out.is_file():
        raise QualifyError(f"{what}: the scoring process exited 0 but wrote no {out.name}")
    return json.loads(out.read_text())


def evaluate_layouts_vllm(
    *, model_dir: Path, cartridge_path: Path, cartridge: Cartridge, eval_path: Path, layouts: Sequence[Layout | str],
    scaling: Scaling | str, n_resamples: int, confidence: float, seed: int, timeout_s: float,
    progress: Callable[[int, int], None] | None = None,
) -> LayoutComparison:  # fmt: skip
    from qualify.serve.prompt_scores import paired_scores

    scaling = Scaling.parse(scaling)
    parsed = [Layout.parse(x) for x in layouts]
    runs = [REFERENCE, *(SERVED[x] for x in parsed)]
    docs = []
    with tempfile.TemporaryDirectory(prefix="qualify-loss-vllm-") as tmp:
        for k, (layout, fake) in enumerate(runs):
            if progress is not None:
                progress(k, len(runs))
            docs.append(score_in_process(layout, fake, model_dir=model_dir, cartridge=cartridge_path,
                                         eval_set=eval_path, scaling=scaling, out=Path(tmp) / f"{k}.json",
                                         timeout_s=timeout_s))  # fmt: skip
    if progress is not None:
        progress(len(runs), len(runs))
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
    return LayoutComparison(
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
