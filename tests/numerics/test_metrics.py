"""Error measures on known inputs, and NaN never reading as a small error."""

from __future__ import annotations

import math

import pytest
import torch

from qualify.numerics.cell import KernelNumericsParams
from qualify.numerics.metrics import ErrorStats, tolerance_checks, worst_of

RTOL = ATOL = 3e-2


def _params() -> KernelNumericsParams:
    return KernelNumericsParams(
        cartridge={"id": "c", "length": 8}, batch={"id": "b", "live_lens": [9]}, rtol=RTOL, atol=ATOL, max_rel_l2=0.015
    )


def _failed(checks: list) -> set[str]:
    return {c.name for c in checks if not c.passed}


def test_errors_on_hand_computed_values() -> None:
    ref = torch.tensor([1.0, -2.0, 0.01, 4.0])
    out = torch.tensor([1.02, -2.1, 0.0, 4.0])
    e = ErrorStats.between(out, ref, RTOL, ATOL)
    assert e.max_abs == pytest.approx(0.1, rel=1e-5)
    # |diff| / max(|ref|, atol): 0.02, 0.05, 0.01 / 0.03 (the atol floor), 0
    assert e.max_rel == pytest.approx(0.01 / 0.03, rel=1e-4)
    assert e.rel_l2 == pytest.approx(math.sqrt(0.02**2 + 0.1**2 + 0.01**2) / math.sqrt(1 + 4 + 1e-4 + 16), rel=1e-4)
    # bounds atol + rtol*|ref| = 0.06, 0.09, 0.0303, 0.15: only the 0.1 error exceeds its bound
    assert (e.nan_count, e.violations) == (0, 1)


def test_one_perturbed_element_is_measured_exactly_on_random_inputs(test_seed: int) -> None:
    seed = test_seed
    gen = torch.Generator().manual_seed(seed)
    ref = torch.randn(64, 8, 16, generator=gen)
    idx = int(torch.randint(0, ref.numel(), (1,), generator=gen))
    bound = ATOL + RTOL * abs(float(ref.view(-1)[idx]))
    for delta, violations in ((0.5 * bound, 0), (2.0 * bound, 1)):
        out = ref.clone()
        out.view(-1)[idx] += delta
        e = ErrorStats.between(out, ref, RTOL, ATOL)
        assert e.max_abs == pytest.approx(delta, rel=1e-3), seed
        assert e.violations == violations, seed
        assert e.rel_l2 == pytest.approx(delta / float(ref.norm()), rel=1e-3), seed
    assert ErrorStats.between(ref, ref, RTOL, ATOL) == ErrorStats(0.0, 0.0, 0.0, 0, 0)


def test_an_unwritten_output_fails_the_nan_and_tolerance_checks(test_seed: int) -> None:
    seed = test_seed
    ref = torch.randn(32, 4, generator=torch.Generator().manual_seed(seed))
    out = ref.clone()
    out[3, 1] = float("nan")
    e = ErrorStats.between(out, ref, RTOL, ATOL)
    assert (e.nan_count, e.violations, e.max_abs) == (1, 1, math.inf), seed
    assert _failed(tolerance_checks("", e, _params(), out.numel())) == {
        "NaN outputs (poisoned buffer)",
        "elements outside atol + rtol*|ref|",
        "relative L2 error",
    }


def test_worst_of_keeps_nan_in_either_position() -> None:
    # Python's max(0.1, nan) is 0.1: the bug this guards against read a NaN error as no error.
    assert math.isnan(worst_of(0.1, math.nan))
    assert math.isnan(worst_of(math.nan, 0.1))
    assert worst_of(0.1, 0.2) == 0.2


def test_a_nan_measure_in_a_later_repeat_fails_the_cell(test_seed: int) -> None:
    seed = test_seed
    gen = torch.Generator().manual_seed(seed)
    ref = torch.randn(16, 4, generator=gen)
    good = ErrorStats.between(ref + 1e-4 * torch.randn(16, 4, generator=gen), ref, RTOL, ATOL)
    assert not _failed(tolerance_checks("", good, _params(), ref.numel())), seed
    # A broken reference (NaN) in the second repeat: every output is then "not within" its bound.
    broken_ref = ref.clone()
    broken_ref[0, 0] = float("nan")
    bad = ErrorStats.between(ref, broken_ref, RTOL, ATOL)
    assert math.isnan(bad.rel_l2) and bad.violations == 1, seed
    worst = good.worst(bad)
    assert math.isnan(worst.rel_l2) and math.isnan(worst.max_rel), seed
    assert "relative L2 error" in _failed(tolerance_checks("", worst, _params(), 2 * ref.numel()))
