"""The accuracy-floor decision for one task and layout, from per-item outcomes (no model, no lm-eval here).

A floor f says the candidate layout must keep f of the reference score measured on the same items in the same
run. The score ratio is estimated with a paired bootstrap CI; McNemar's exact test and the power statement are
reported beside it. `point` decides on the ratio itself (MLPerf's rule); `ci_lower` on the lower end of a
two-sided (1 - 2 alpha) CI, i.e. a one-sided non-inferiority test at level alpha.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from qualify.results import Check, Shortfall
from qualify.stats.paired import discordance, mcnemar_exact_p, paired_outcomes, score_ratio_ci
from qualify.stats.power import PowerStatement, power_statement

Decision = Literal["point", "ci_lower"]


@dataclass(frozen=True)
class FloorRule:
    floors: tuple[float, ...]
    decision: Decision
    alpha: float = 0.05
    beta: float = 0.2
    assumed_discordance: float | None = None
    n_resamples: int = 2000
    allow_underpowered: bool = False

    @property
    def confidence(self) -> float:
        return 1.0 - 2.0 * self.alpha


@dataclass(frozen=True)
class FloorResult:
    checks: list[Check]
    measurements: dict[str, Any]
    notes: list[str]
    powers: list[PowerStatement]
    shortfalls: list[Shortfall]

    @property
    def underpowered(self) -> bool:
        return any(p.underpowered for p in self.powers)


def evaluate_floor(
    reference: npt.ArrayLike,
    candidate: npt.ArrayLike,
    rule: FloorRule,
    rng: np.random.Generator,
    *,
    label: str,
) -> FloorResult:
    """Decide every floor of `rule` for paired 0/1 outcomes; `label` names the task and layout in check names."""
    # Validated, not cast: a casting bool() would read a score of 2 (or 0.5) as correct without a word.
    ref, cand = paired_outcomes(reference, candidate)
    table = discordance(ref, cand)
    ci = score_ratio_ci(ref, cand, rng, rule.n_resamples, rule.confidence)
    p_value = mcnemar_exact_p(table.ref_only, table.cand_only)
    ref_score, cand_score = float(ref.mean()), float(cand.mean())
    decided_on = ci.estimate if rule.decision == "point" else ci.low
    statistic = (
        f"score ratio (candidate/reference correct on the same {table.n} items); paired percentile bootstrap "
        f"{100 * rule.confidence:g} % CI, {rule.n_resamples} resamples; decided on the "
        + ("point estimate" if rule.decision == "point" else "CI's lower end (one-sided non-inferiority)")
    )
    checks, powers, floors = [], [], []
    for floor in rule.floors:
        power = power_statement(table.n, rule.alpha, rule.beta, ref_score, floor, rule.assumed_discordance)
        powers.append(power)
        check = Check(
            name=f"{label} keeps {floor:g} of reference",
            observed=ci.estimate,
            operator=">=",
            threshold=floor,
            statistic=statistic,
            n=table.n,
            ci_low=ci.low,
            ci_high=ci.high,
            decided_on=decided_on,
            unit="ratio",
            outcome=_floor_outcome(rule, power.underpowered, ci.low, ci.high, floor),
        )
        checks.append(check)
        # The floor itself and whether it passed are the check's: a report states them once, there.
        floors.append(
            {
                "check": check.name,
                "allowed_drop": power.allowed_drop,
                "underpowered": power.underpowered,
                "power_statement": power.sentence(),
            }
        )
    notes = []
    if any(p.underpowered for p in powers):
        worst = min(powers, key=lambda p: p.allowed_drop)
        if worst.allowed_drop > 0.0:
            text = (
                f"underpowered: n={table.n} resolves only a {100 * worst.min_resolvable_drop:.1f}-point drop at "
                f"alpha {rule.alpha:g}, beta {rule.beta:g}; the finest floor ({worst.floor:g}) allows "
                f"{100 * worst.allowed_drop:.2f} points"
            )
        else:
            text = worst.sentence()
        notes.append(text + ("; this is a smoke test, not a certification" if rule.allow_underpowered else ""))
    shortfalls = _shortfalls(ref, powers, notes[0] if notes else "")
    measurements = {
        "n": table.n,
        "reference_score": ref_score,
        "score": cand_score,
        "delta_points": 100.0 * (cand_score - ref_score),
        "ratio": ci.estimate,
        "ratio_defined": bool(ref.any()),
        "ratio_ci_low": ci.low,
        "ratio_ci_high": ci.high,
        "ratio_ci_confidence": rule.confidence,
        "n_resamples": rule.n_resamples,
        "decision": rule.decision,
        "decided_on": decided_on,
        "mcnemar_p": p_value,
        "discordant": {"ref_only": table.ref_only, "cand_only": table.cand_only},
        "paired_table": asdict(table),
        "discordance_rate": table.rate,
        "power": {
            "alpha": rule.alpha,
            "beta": rule.beta,
            "assumed_discordance": powers[0].discordance,
            "discordance_assumed": powers[0].discordance_assumed,
            "min_resolvable_drop": powers[0].min_resolvable_drop,
        },
        "min_resolvable_drop": powers[0].min_resolvable_drop,
        "floors": floors,
        "underpowered": any(p.underpowered for p in powers),
        "smoke": any(p.underpowered for p in powers) and rule.allow_underpowered,
    }
    return FloorResult(checks=checks, measurements=measurements, notes=notes, powers=powers, shortfalls=shortfalls)


def _floor_outcome(rule: FloorRule, underpowered: bool, low: float, high: float, floor: float) -> str | None:
    """None (decided on `decided_on` as usual) except for an underpowered smoke test decided on the CI, whose CI
    straddles the floor: at that n the data neither clear nor miss it ("inconclusive", the item INCOMPLETE).
    A CI wholly below the floor still fails: the drop was shown even with few items."""
    if rule.decision == "ci_lower" and underpowered and rule.allow_underpowered and low < floor <= high:
        return "inconclusive"
    return None


def _shortfalls(ref: npt.NDArray[np.bool_], powers: list[PowerStatement], power_note: str) -> list[Shortfall]:
    """Why no floor could have failed: a reference with no item right makes the ratio 1 by convention, and an
    underpowered floor cannot resolve the drop it bounds. Either way the item is INCOMPLETE, not PASS."""
    out = []
    if not ref.any():
        out.append(
            Shortfall("vacuous", f"the reference scored 0 of {ref.size}: no floor could fail (ratio taken as 1)")
        )
    if any(p.underpowered for p in powers):
        out.append(Shortfall("underpowered", power_note.removeprefix("underpowered: ")))
    return out
