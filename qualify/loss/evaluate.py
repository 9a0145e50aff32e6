"""Answer-token loss of a causal LM behind a cartridge, and its paired comparison across KV layouts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from transformers import PreTrainedModel

from qualify.cartridge.types import Cartridge
from qualify.loss.data import EvalItem, EvalSet, check_vocab
from qualify.loss.forward import Batch, Prefix, answer_log_probs, make_batches, prepare_prefix
from qualify.quant.apply import QuantStats, apply_layout
from qualify.quant.fp8 import Scaling
from qualify.quant.layouts import Layout
from qualify.stats.bootstrap import DEFAULT_RESAMPLES, bootstrap_indices, ratio_of_sums_ci

DEFAULT_BATCH_SIZE = 16


@dataclass(frozen=True)
class LossResult:
    loss: float  # total NLL / total answer tokens
    n_items: int
    n_tokens: int
    item_ids: tuple[str, ...]
    item_nll: npt.NDArray[np.float64]  # summed NLL per item, in input order
    item_tokens: npt.NDArray[np.int64]


@dataclass(frozen=True)
class ReferenceResult:
    loss: float
    n_items: int
    n_tokens: int


@dataclass(frozen=True)
class LayoutResult:
    layout: Layout
    loss: float
    rel_increase: float  # (loss - reference loss) / reference loss
    ci_low: float  # paired bootstrap CI of rel_increase
    ci_high: float
    kl_mean: float  # KL(reference || layout) per answer position, nats
    top1_agreement: float  # fraction of answer positions whose argmax matches the reference
    n_items: int
    n_tokens: int
    saturated_k: int  # elements clipped at ±448, all layers
    saturated_v: int
    scaling: Scaling


@dataclass(frozen=True)
class LayoutItemScores:
    layout: Layout
    nll: npt.NDArray[np.float64]  # summed per item
    kl: npt.NDArray[np.float64]  # summed over the item's answer positions
    top1_matches: npt.NDArray[np.int64]  # answer positions whose argmax matches the reference


@dataclass(frozen=True)
class ItemArrays:
    """Per-item measurements in input order, kept so the report can show and re-derive every number."""

    ids: tuple[str, ...]
    tokens: npt.NDArray[np.int64]
    reference_nll: npt.NDArray[np.float64]
    by_layout: tuple[LayoutItemScores, ...]


@dataclass(frozen=True)
class LayoutComparison:
    reference: ReferenceResult
    layouts: tuple[LayoutResult, ...]
    items: ItemArrays
    quant_stats: tuple[QuantStats, ...]
    confidence: float
    n_resamples: int
    seed: int


class _Accumulator:
    """Per-item sums for one variant, filled batch by batch."""

    def __init__(self, n_items: int):
        self.nll = np.zeros(n_items, dtype=np.float64)
        self.kl = np.zeros(n_items, dtype=np.float64)
        self.top1 = np.zeros(n_items, dtype=np.int64)
        self.tokens = np.zeros(n_items, dtype=np.int64)

    def add(self, batch: Batch, nll: torch.Tensor, kl: torch.Tensor | None, top1: torch.Tensor | None) -> None:
        rows = batch.answer_rows
        b = len(batch.item_indices)
        where = np.asarray(batch.item_indices)

        def per_row(x: torch.Tensor) -> np.ndarray:
            return torch.zeros(b, dtype=torch.float64, device=x.device).index_add_(0, rows, x.double()).cpu().numpy()

        self.nll[where] += per_row(nll)
        self.tokens[where] += np.bincount(rows.cpu().numpy(), minlength=b)
        if kl is not None and top1 is not None:
            self.kl[where] += per_row(kl)
            self.top1[where] += np.rint(per_row(top1)).astype(np.int64)


def _as_items(items: EvalSet | Sequence[EvalItem]) -> tuple[tuple[EvalItem, ...], str]:
    if isinstance(items, EvalSet):
        return items.items, items.path
    return tuple(items), "<eval items>"


def _prepare(model: PreTrainedModel, items: EvalSet | Sequence[EvalItem]) -> tuple[EvalItem, ...]:
    if model.training:
        raise ValueError("model is in training mode; call model.eval() so dropout cannot change the loss")
    seq, path = _as_items(items)
    if not seq:
        raise ValueError("no eval items")
    check_vocab(seq, int(model.config.vocab_size), path)
    return seq


def _nll(logp: torch.Tensor, batch: Batch) -> torch.Tensor:
    return -logp.gather(1, batch.answer_targets.unsqueeze(1)).squeeze(1)


def evaluate_loss(
    model: PreTrainedModel,
    cartridge: Cartridge,
    items: EvalSet | Sequence[EvalItem],
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> LossResult:
    """Mean answer-token NLL of `items` with `cartridge` as the KV prefix."""
    seq = _prepare(model, items)
    prefix = prepare_prefix(model, cartridge)
    acc = _Accumulator(len(seq))
    device = prefix.keys[0].device
    with torch.inference_mode():
        for batch in make_batches(seq, batch_size, device):
            acc.add(batch, _nll(answer_log_probs(model, prefix, batch), batch), None, None)
    n_tokens = int(acc.tokens.sum())
    return LossResult(
        loss=float(acc.nll.sum() / n_tokens),
        n_items=len(seq),
        n_tokens=n_tokens,
        item_ids=tuple(item.id for item in seq),
        item_nll=acc.nll,
        item_tokens=acc.tokens,
    )


def _same_tensors(a: Cartridge, b: Cartridge) -> bool:
    return all(x is y or torch.equal(x, y) for x, y in zip(a.keys + a.values, b.keys + b.values, strict=True))


def layout_result(
    stats: QuantStats, nll: npt.NDArray[np.float64], reference_nll: npt.NDArray[np.float64],
    kl: npt.NDArray[np.float64], top1: npt.NDArray[np.int64], n_tokens: int, indices: npt.NDArray[np.int64],
    confidence: float,
) -> LayoutResult:  # fmt: skip
    """One layout's paired result from its per-item sums (NLL, KL, top-1 matches) against the reference's NLL,
    over `n_tokens` answer tokens, with the bootstrap `indices` every layout of the comparison shares."""
    ci = ratio_of_sums_ci(nll, reference_nll, indices, confidence)
    return LayoutResult(
        layout=stats.layout,
        loss=float(nll.sum() / n_tokens),
        rel_increase=ci.estimate - 1.0,
        ci_low=ci.low - 1.0,
        ci_high=ci.high - 1.0,
        kl_mean=float(kl.sum() / n_tokens),
        top1_agreement=float(top1.sum() / n_tokens),
        n_items=len(nll),
        n_tokens=n_tokens,
        saturated_k=stats.total_saturated_k,
        saturated_v=stats.total_saturated_v,
        scaling=stats.scaling,
    )


def evaluate_layouts(
    model: PreTrainedModel,
    cartridge: Cartridge,
    items: EvalSet | Sequence[EvalItem],
    layouts: Sequence[Layout | str],
    scaling: Scaling | str = Scaling.NONE,
    batch_size: int = DEFAULT_BATCH_SIZE,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> LayoutComparison:
    """Compare each layout's fake-quantized cartridge with the cartridge as stored, on the same items.

    Each batch runs the reference once and every layout after it, so only one batch of full-vocab log-probs
    is alive at a time. A layout whose quantized cartridge equals the reference bit for bit (K16/V16 always)
    reuses the reference pass: its numbers are then exactly zero difference, not rounding noise.
    """
    seq = _prepare(model, items)
    scaling = Scaling.parse(scaling)
    parsed = [Layout.parse(layout) for layout in layouts]
    if len(set(parsed)) != len(parsed):
        raise ValueError(f"layouts listed twice: {[str(x) for x in parsed]}")
    quantized = [apply_layout(cartridge, layout, scaling) for layout in parsed]
    ref_prefix = prepare_prefix(model, cartridge)
    prefixes: list[Prefix | None] = [
        None if _same_tensors(q, cartridge) else prepare_prefix(model, q) for q, _ in quantized
    ]
    device = ref_prefix.keys[0].device
    ref_acc = _Accumulator(len(seq))
    accs = [_Accumulator(len(seq)) for _ in parsed]
    done = 0
    with torch.inference_mode():
        for batch in make_batches(seq, batch_size, device):
            if progress is not None:
                progress(done, len(seq))
            ref = answer_log_probs(model, ref_prefix, batch)
            ref_acc.add(batch, _nll(ref, batch), None, None)
            p_ref = ref.exp()
            ref_top = ref.argmax(dim=-1)
            for prefix, acc in zip(prefixes, accs, strict=True):
                if prefix is None:
                    zeros = torch.zeros_like(ref_top, dtype=torch.float32)
                    acc.add(batch, _nll(ref, batch), zeros, torch.ones_like(zeros))
                    continue
                lay = answer_log_probs(model, prefix, batch)
                top1 = (lay.argmax(dim=-1) == ref_top).float()
                nll = _nll(lay, batch)
                kl = lay.neg_().add_(ref).mul_(p_ref).sum(dim=-1)  # in place: (ref - lay) * p_ref
                acc.add(batch, nll, kl, top1)
                del lay
            done += len(batch.item_indices)
    if progress is not None:
        progress(len(seq), len(seq))

    n_tokens = int(ref_acc.tokens.sum())
    ref_loss = float(ref_acc.nll.sum() / n_tokens)
    indices = bootstrap_indices(len(seq), np.random.default_rng(seed), n_resamples)
    results = [
        layout_result(stats, acc.nll, ref_acc.nll, acc.kl, acc.top1, n_tokens, indices, confidence)
        for (_, stats), acc in zip(quantized, accs, strict=True)
    ]
    return LayoutComparison(
        reference=ReferenceResult(loss=ref_loss, n_items=len(seq), n_tokens=n_tokens),
        layouts=tuple(results),
        items=ItemArrays(
            ids=tuple(item.id for item in seq),
            tokens=ref_acc.tokens,
            reference_nll=ref_acc.nll,
            by_layout=tuple(
                LayoutItemScores(layout=layout, nll=acc.nll, kl=acc.kl, top1_matches=acc.top1)
                for layout, acc in zip(parsed, accs, strict=True)
            ),
        ),
        quant_stats=tuple(stats for _, stats in quantized),
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
    )
