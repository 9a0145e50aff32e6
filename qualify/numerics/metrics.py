"""Error measures of an output against a reference, and the tolerance checks decided on them.

max_rel is max |out - ref| / max(|ref|, atol), so elements near zero do not dominate it; the decision uses
the elementwise bound |out - ref| <= atol + rtol * |ref| (as torch.testing.assert_close) and the relative
L2 error. NaN is never lost: a NaN measure stays NaN through `worst`, and a NaN check never passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from qualify.numerics.check_names import REL_L2_CHECK
from qualify.results import Check

if TYPE_CHECKING:
    from qualify.numerics.cell import KernelNumericsParams


def worst_of(a: float, b: float) -> float:
    """max(a, b), except that NaN wins: Python's max keeps its first argument when compared with NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return max(a, b)


@dataclass(frozen=True)
class ErrorStats:
    """How far an output is from a reference; `worst` accumulates it over repeats."""

    max_abs: float
    max_rel: float
    rel_l2: float
    nan_count: int
    violations: int

    @staticmethod
    def between(out: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> ErrorStats:
        """Errors of `out` against `ref` (any shapes that match); NaN outputs count as infinitely wrong."""
        out32, ref32 = out.float(), ref.float()
        nan_count = int(torch.isnan(out32).sum())
        diff = (out32 - ref32).abs().nan_to_num(nan=float("inf"))
        bound = atol + rtol * ref32.abs()
        return ErrorStats(
            max_abs=float(diff.max()),
            max_rel=float((diff / ref32.abs().clamp_min(atol)).max()),
            rel_l2=float(diff.norm() / ref32.norm().clamp_min(1e-30)),
            nan_count=nan_count,
            # Counted as "not within", so that a NaN bound (a NaN reference) is a violation, not a pass.
            violations=int((~(diff <= bound)).sum()),
        )

    def worst(self, other: ErrorStats) -> ErrorStats:
        """The worse of two measurements: largest errors (NaN if either is NaN), summed counts."""
        return ErrorStats(
            worst_of(self.max_abs, other.max_abs),
            worst_of(self.max_rel, other.max_rel),
            worst_of(self.rel_l2, other.rel_l2),
            self.nan_count + other.nan_count,
            self.violations + other.violations,
        )


def tolerance_checks(prefix: str, e: ErrorStats, p: KernelNumericsParams, n: int) -> list[Check]:
    """NaN outputs, elements outside atol + rtol*|ref| and the relative L2 error, each against its bound."""
    return [
        Check(
            name=f"{prefix}NaN outputs (poisoned buffer)",
            observed=float(e.nan_count),
            operator="<=",
            threshold=0.0,
            statistic="elements still NaN after the launch; the output was filled with NaN before it",
            n=n,
        ),
        Check(
            name=f"{prefix}elements outside atol + rtol*|ref|",
            observed=float(e.violations),
            operator="<=",
            threshold=0.0,
            statistic=f"count over all outputs, rtol={p.rtol}, atol={p.atol} (max abs err {e.max_abs:.3e})",
            n=n,
        ),
        Check(
            name=f"{prefix}{REL_L2_CHECK}",
            observed=e.rel_l2,
            operator="<=",
            threshold=p.max_rel_l2,
            statistic="||out - ref||_2 / ||ref||_2, worst over repeats",
            n=n,
        ),
    ]


def rel_l2_f64(out: torch.Tensor, ref64: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (NaN outputs make it infinite)."""
    diff = (out.double() - ref64).nan_to_num(nan=float("inf"))
    return float(diff.norm() / ref64.norm().clamp_min(1e-300))


@dataclass(frozen=True)
class OracleTie:
    """The kernel's and an accepted implementation's errors against float64 on the same inputs, and the bound
    `oracle_factor * oracle + oracle_eps` the kernel's must stay within."""

    kernel: float
    oracle: float
    bound: float
    oracle_name: str

    @staticmethod
    def measure(
        out: torch.Tensor, accepted: torch.Tensor, ref64: torch.Tensor, p: KernelNumericsParams, name: str | None
    ) -> OracleTie:
        oracle = rel_l2_f64(accepted, ref64)
        return OracleTie(
            kernel=rel_l2_f64(out, ref64),
            oracle=oracle,
            bound=p.oracle_factor * oracle + p.oracle_eps,
            oracle_name=name or "fp32-reference-rounded-to-output-dtype",
        )

    def closer_to_bound_than(self, other: OracleTie) -> bool:
        """Whether this repeat uses more of its bound (NaN counts as over it), so the check reports the worst."""
        mine, theirs = self.kernel / self.bound, other.kernel / other.bound
        return math.isnan(mine) or (not math.isnan(theirs) and mine > theirs)

    def check(self, n: int) -> Check:
        return Check(
            name=f"{REL_L2_CHECK} vs float64, tied to {self.oracle_name}",
            observed=self.kernel,
            operator="<=",
            threshold=self.bound,
            statistic=(
                f"kernel ||out - ref64|| / ||ref64|| against oracle_factor x the accepted implementation's "
                f"({self.oracle:.3e}) + oracle_eps; the repeat closest to its bound"
            ),
            n=n,
        )
