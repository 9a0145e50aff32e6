"""Paired percentile bootstrap for ratios of sums over items.

"Paired" means one set of resampled item indices is applied to every quantity, so item difficulty cancels
between a reference and a variant measured on the same items.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

DEFAULT_RESAMPLES = 2000


@dataclass(frozen=True)
class BootstrapCI:
    estimate: float  # the statistic on the original sample
    low: float
    high: float
    confidence: float
    n_resamples: int


def bootstrap_indices(
    n_items: int, rng: np.random.Generator, n_resamples: int = DEFAULT_RESAMPLES
) -> npt.NDArray[np.intp]:
    """(n_resamples, n_items) item indices drawn with replacement; share them to pair statistics."""
    if n_items < 1:
        raise ValueError("need at least one item to resample")
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    return rng.integers(0, n_items, size=(n_resamples, n_items), dtype=np.intp)


def ratio_of_sums_ci(
    numerator: npt.ArrayLike,
    denominator: npt.ArrayLike,
    indices: npt.NDArray[np.intp],
    confidence: float = 0.95,
) -> BootstrapCI:
    """Percentile CI of sum(numerator) / sum(denominator) under the given resamples.

    With per-item NLL sums as numerator and denominator (same items, same tokens), this is the token-weighted
    loss ratio: items count in proportion to their answer tokens, as the pooled mean loss does.
    """
    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    if num.shape != den.shape or num.ndim != 1:
        raise ValueError(f"numerator {num.shape} and denominator {den.shape} must be equal 1-D shapes")
    if indices.ndim != 2 or indices.shape[1] != num.shape[0]:
        raise ValueError(f"indices {indices.shape} do not resample {num.shape[0]} items")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    ratios = num[indices].sum(axis=1) / den[indices].sum(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(ratios, [alpha / 2.0, 1.0 - alpha / 2.0])
    return BootstrapCI(
        estimate=float(num.sum() / den.sum()),
        low=float(low),
        high=float(high),
        confidence=confidence,
        n_resamples=int(indices.shape[0]),
    )


def paired_ratio_ci(
    numerator: npt.ArrayLike,
    denominator: npt.ArrayLike,
    rng: np.random.Generator,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
) -> BootstrapCI:
    """`ratio_of_sums_ci` with fresh indices drawn from `rng`."""
    n = int(np.asarray(numerator).shape[0])
    return ratio_of_sums_ci(numerator, denominator, bootstrap_indices(n, rng, n_resamples), confidence)
