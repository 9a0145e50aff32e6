"""Paired binary outcomes: two systems scored on the same items (reference and candidate).

McNemar's exact test looks only at discordant items (right under one system, wrong under the other); under the
null hypothesis of equal accuracy each discordant item is a fair coin. The score-ratio CI resamples items, not
outcomes, so the pairing (item difficulty) cancels between the two scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from qualify.stats.bootstrap import DEFAULT_RESAMPLES, BootstrapCI, bootstrap_indices


@dataclass(frozen=True)
class Discordance:
    """Counts of the 2x2 paired table."""

    both: int  # right under both
    ref_only: int  # right under the reference, wrong under the candidate
    cand_only: int  # wrong under the reference, right under the candidate
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.ref_only + self.cand_only + self.neither

    @property
    def discordant(self) -> int:
        return self.ref_only + self.cand_only

    @property
    def rate(self) -> float:
        """Fraction of items whose outcome differs between the two systems."""
        return self.discordant / self.n if self.n else 0.0


def paired_outcomes(
    reference: npt.ArrayLike, candidate: npt.ArrayLike
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Both outcome vectors as bool; ValueError unless they are equal-length 1-D vectors of 0/1 (or bool)."""
    ref = np.asarray(reference)
    cand = np.asarray(candidate)
    if ref.shape != cand.shape or ref.ndim != 1:
        raise ValueError(f"reference {ref.shape} and candidate {cand.shape} must be equal 1-D shapes")
    for name, arr in (("reference", ref), ("candidate", cand)):
        if not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} outcomes must be 0/1 (or bool)")
    return ref.astype(bool), cand.astype(bool)


def discordance(reference: npt.ArrayLike, candidate: npt.ArrayLike) -> Discordance:
    ref, cand = paired_outcomes(reference, candidate)
    return Discordance(
        both=int((ref & cand).sum()),
        ref_only=int((ref & ~cand).sum()),
        cand_only=int((~ref & cand).sum()),
        neither=int((~ref & ~cand).sum()),
    )


def mcnemar_exact_p(ref_only: int, cand_only: int) -> float:
    """Two-sided exact McNemar p-value: 2 * P(X <= min(b, c)) for X ~ Binomial(b + c, 1/2), capped at 1.

    Summed in exact rational arithmetic, so it stays exact for the thousands of discordant items a full MMLU run
    can have (a float sum of tiny binomial terms would underflow). No discordant items: p = 1.
    """
    if ref_only < 0 or cand_only < 0:
        raise ValueError("discordant counts cannot be negative")
    m = ref_only + cand_only
    if m == 0:
        return 1.0
    k = min(ref_only, cand_only)
    tail = Fraction(sum(math.comb(m, i) for i in range(k + 1)), 2**m)
    return float(min(Fraction(1), 2 * tail))


def score_ratio_ci(
    reference: npt.ArrayLike,
    candidate: npt.ArrayLike,
    rng: np.random.Generator,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
) -> BootstrapCI:
    """Paired percentile bootstrap CI of candidate score / reference score (accuracy ratio).

    One set of item indices serves both systems. A (re)sample in which the reference got nothing right has
    ratio 1 by convention: a floor that is a fraction of zero is met by any candidate, and the power statement
    is what tells the reader that such a sample shows nothing. Every ratio is finite, so reports stay valid JSON.
    """
    ref, cand = paired_outcomes(reference, candidate)
    if ref.size == 0:
        raise ValueError("need at least one item")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    idx = bootstrap_indices(ref.size, rng, n_resamples)
    ref_sums = ref[idx].sum(axis=1).astype(np.float64)
    cand_sums = cand[idx].sum(axis=1).astype(np.float64)
    ratios = np.divide(cand_sums, ref_sums, out=np.ones_like(ref_sums), where=ref_sums > 0)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return BootstrapCI(
        estimate=score_ratio(ref, cand),
        low=float(low),
        high=float(high),
        confidence=confidence,
        n_resamples=n_resamples,
    )


def score_ratio(reference: npt.ArrayLike, candidate: npt.ArrayLike) -> float:
    """Candidate correct / reference correct on the same items; 1 when the reference got none right."""
    ref, cand = paired_outcomes(reference, candidate)
    r = int(ref.sum())
    return float(cand.sum()) / r if r else 1.0
