"""Which drop in accuracy a paired comparison of n items can resolve.

Model: each item gives a difference d_i = reference_i - candidate_i in {-1, 0, 1}. With discordance rate psi
(the fraction of items whose outcome differs) and a true drop delta, Var(d_i) = psi - delta^2. A one-sided
test at level alpha on the mean difference (normal approximation, as in McNemar-type sample-size formulas,
e.g. Connor 1987) detects delta with power 1 - beta when

    delta = (z_{1-alpha} + z_{1-beta}) * sqrt((psi - delta^2) / n),

whose positive root is the smallest resolvable drop

    delta_min = z * sqrt(psi / (n + z^2)),   z = z_{1-alpha} + z_{1-beta}.

psi is not known before the run. Unless the gate declares one (from a pilot run), it is taken as 2 p (1 - p) for
reference score p: the discordance of two systems whose errors are independent given p. Quantization usually
flips far fewer items than that, so the default is conservative, and a gate that knows better may say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist


def _check_probability(name: str, value: float, *, open_low: bool = True) -> None:
    low_ok = value > 0.0 if open_low else value >= 0.0
    if not (low_ok and value < 1.0):
        raise ValueError(f"{name} must be in {'(0' if open_low else '[0'}, 1), got {value}")


def independent_discordance(reference_score: float) -> float:
    """psi = 2 p (1 - p): the discordance rate of paired outcomes with independent errors."""
    if not 0.0 <= reference_score <= 1.0:
        raise ValueError(f"reference_score must be in [0, 1], got {reference_score}")
    return 2.0 * reference_score * (1.0 - reference_score)


def min_resolvable_drop(
    n: int, alpha: float, beta: float, reference_score: float, discordance: float | None = None
) -> float:
    """Smallest absolute accuracy drop (a fraction, e.g. 0.012 = 1.2 points) resolvable at (alpha, beta)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    _check_probability("alpha", alpha)
    _check_probability("beta", beta)
    psi = independent_discordance(reference_score) if discordance is None else discordance
    if not 0.0 <= psi <= 1.0:
        raise ValueError(f"discordance must be in [0, 1], got {psi}")
    z = NormalDist().inv_cdf(1.0 - alpha) + NormalDist().inv_cdf(1.0 - beta)
    return z * math.sqrt(psi / (n + z * z))


@dataclass(frozen=True)
class PowerStatement:
    """Whether a floor (a fraction of the reference score) is finer than what n items can resolve."""

    n: int
    alpha: float
    beta: float
    reference_score: float
    discordance: float  # assumed psi
    discordance_assumed: str  # "independent errors" or "declared"
    floor: float
    min_resolvable_drop: float  # absolute, fraction of items
    allowed_drop: float  # (1 - floor) * reference_score, absolute

    @property
    def underpowered(self) -> bool:
        # A reference that scores zero allows no drop at all; no n can show that a drop of zero is respected.
        return self.allowed_drop <= 0.0 or self.allowed_drop < self.min_resolvable_drop

    def sentence(self) -> str:
        if self.allowed_drop <= 0.0:
            return (
                f"underpowered: the reference scores {100 * self.reference_score:.2f} % on n={self.n}, so the "
                f"{self.floor:g} floor allows no drop and no sample size can show it"
            )
        verdict = "underpowered" if self.underpowered else "powered"
        return (
            f"{verdict}: n={self.n} resolves a drop of {100 * self.min_resolvable_drop:.2f} points at alpha "
            f"{self.alpha:g}, beta {self.beta:g} (reference {100 * self.reference_score:.2f} %, discordance "
            f"{100 * self.discordance:.1f} %, {self.discordance_assumed}); the {self.floor:g} floor allows "
            f"{100 * self.allowed_drop:.3f} points"
        )


def power_statement(
    n: int,
    alpha: float,
    beta: float,
    reference_score: float,
    floor: float,
    discordance: float | None = None,
) -> PowerStatement:
    if not 0.0 < floor <= 1.0:
        raise ValueError(f"floor must be in (0, 1], got {floor}")
    psi = independent_discordance(reference_score) if discordance is None else discordance
    return PowerStatement(
        n=n,
        alpha=alpha,
        beta=beta,
        reference_score=reference_score,
        discordance=psi,
        discordance_assumed="independent errors" if discordance is None else "declared",
        floor=floor,
        min_resolvable_drop=min_resolvable_drop(n, alpha, beta, reference_score, psi),
        allowed_drop=(1.0 - floor) * reference_score,
    )
