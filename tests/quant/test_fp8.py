"""FP8 E4M3 fake quantization against an independent bit-level reference built from all 256 codes."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from qualify.quant.fp8 import E4M3_MAX, Scaling, amax_scale, fake_quant_e4m3


def _decode_e4m3(code: int) -> float:
    """Value of one E4M3 (fn) byte: 1 sign, 4 exponent (bias 7), 3 mantissa bits; S.1111.111 is NaN."""
    sign = -1.0 if code & 0x80 else 1.0
    exp = (code >> 3) & 0xF
    man = code & 0x7
    if exp == 0xF and man == 0x7:
        return float("nan")
    if exp == 0:
        return sign * (man / 8.0) * 2.0**-6
    return sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)


# Non-negative finite values indexed by their code (0x00..0x7E), which is increasing in value.
_POSITIVE = np.array([_decode_e4m3(c) for c in range(0x7F)], dtype=np.float64)


def _reference_quant(x: np.ndarray) -> np.ndarray:
    """Nearest E4M3 value, ties to the even code, saturating at ±448, NaN kept: float64, exact."""
    x = np.asarray(x, dtype=np.float64)
    mag = np.minimum(np.abs(x), _POSITIVE[-1])
    hi = np.clip(np.searchsorted(_POSITIVE, mag, side="left"), 0, len(_POSITIVE) - 1)
    lo = np.clip(hi - 1, 0, None)
    d_lo = mag - _POSITIVE[lo]
    d_hi = _POSITIVE[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    idx = np.where(pick_hi, hi, lo)
    out = np.copysign(_POSITIVE[idx], x)
    return np.where(np.isnan(x), np.nan, out)


def _random_wide(n: int, gen: torch.Generator) -> torch.Tensor:
    """Values spread from deep subnormal to beyond 448, so every binade and the saturation path are hit."""
    log2_mag = torch.rand(n, generator=gen) * 24.0 - 14.0
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
    return sign * torch.exp2(log2_mag) * (1.0 + torch.rand(n, generator=gen))


def test_reference_table_is_e4m3fn() -> None:
    assert len(_POSITIVE) == 127
    assert _POSITIVE[-1] == 448.0
    assert _POSITIVE[1] == 2.0**-9  # smallest subnormal
    assert _POSITIVE[8] == 2.0**-6  # smallest normal
    assert np.all(np.diff(_POSITIVE) > 0)
    assert np.isnan(_decode_e4m3(0x7F)) and np.isnan(_decode_e4m3(0xFF))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_every_finite_code_is_unchanged(dtype: torch.dtype) -> None:
    codes = [c for c in range(256) if c not in (0x7F, 0xFF)]
    x = torch.tensor([_decode_e4m3(c) for c in codes], dtype=torch.float64).to(dtype)
    fq = fake_quant_e4m3(x)
    assert fq.values.dtype == dtype
    assert torch.equal(fq.values, x)
    assert fq.saturated == 0


def test_every_midpoint_rounds_to_even_code() -> None:
    # Midpoints of all adjacent pairs: subnormals, the subnormal/normal seam and every normal binade.
    lo, hi = _POSITIVE[:-1], _POSITIVE[1:]
    mid = (lo + hi) / 2.0
    expected = np.where(np.arange(len(lo)) % 2 == 0, lo, hi)
    for sign in (1.0, -1.0):
        x = torch.tensor(sign * mid, dtype=torch.float32)
        assert torch.equal(x.double(), torch.tensor(sign * mid))  # midpoints are exact in float32
        got = fake_quant_e4m3(x).values.double().numpy()
        np.testing.assert_array_equal(got, sign * expected)


@pytest.mark.parametrize(
    ("x", "want"),
    [
        (2.0**-10, 0.0),  # half the smallest subnormal: tie to 0 (even)
        (3 * 2.0**-10, 2.0**-8),  # between 1 and 2 subnormal steps: tie to 2 (even)
        (5 * 2.0**-10, 2.0**-8),  # between 2 and 3: tie to 2
        (1.0625, 1.0),  # between 1.0 and 1.125
        (1.1875, 1.25),  # between 1.125 and 1.25
        (0.9375 + 2**-5, 1.0),  # 15/16 + 1/32 = 0.96875: between 0.9375 and 1.0, tie to 1.0 (code 0x38)
        (272.0, 256.0),  # between 256 and 288
        (304.0, 320.0),  # between 288 and 320
    ],
)
def test_named_ties(x: float, want: float) -> None:
    got = fake_quant_e4m3(torch.tensor([x, -x])).values
    assert got.tolist() == [want, -want]


def test_saturation_boundary() -> None:
    x = torch.tensor([448.0, 447.0, 448.5, 464.0, 500.0, -1e6, float("inf"), -float("inf"), -448.0])
    fq = fake_quant_e4m3(x)
    assert fq.values.tolist() == [448.0, 448.0, 448.0, 448.0, 448.0, -448.0, 448.0, -448.0, -448.0]
    assert fq.saturated == 6  # 448.5, 464, 500, -1e6, ±inf; exactly ±448 is not saturated


def test_nan_stays_nan_and_is_not_counted() -> None:
    x = torch.tensor([float("nan"), 1.0, 1000.0])
    fq = fake_quant_e4m3(x)
    assert torch.isnan(fq.values[0])
    assert fq.values[1:].tolist() == [1.0, 448.0]
    assert fq.saturated == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_reference_on_random_inputs(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(random.getrandbits(31))
    x = _random_wide(20_000, gen).to(dtype)
    fq = fake_quant_e4m3(x)
    ref = _reference_quant(x.double().numpy())
    np.testing.assert_array_equal(fq.values.double().numpy(), ref)
    assert fq.saturated == int((x.double().abs() > E4M3_MAX).sum())
    assert fq.saturated > 0  # the generator reaches past 448, so the path was exercised


def test_matches_torch_cast_inside_range() -> None:
    x = _random_wide(20_000, torch.Generator().manual_seed(random.getrandbits(31)))
    x = x.clamp(-E4M3_MAX, E4M3_MAX)
    via_torch = x.to(torch.float8_e4m3fn).to(torch.float32)
    assert torch.equal(fake_quant_e4m3(x).values, via_torch)


def test_scale_divides_before_rounding() -> None:
    gen = torch.Generator().manual_seed(random.getrandbits(31))
    x = torch.randn(64, 4, 8, generator=gen) * 50
    scale = torch.tensor([0.5, 2.0, 0.125, 3.0]).view(1, 4, 1)
    fq = fake_quant_e4m3(x, scale)
    y = (x / scale).double().numpy()
    want = _reference_quant(y) * scale.double().numpy()
    np.testing.assert_allclose(fq.values.double().numpy(), want, rtol=1e-6, atol=0)
    assert fq.saturated == int((np.abs(y) > E4M3_MAX).sum())


@pytest.mark.parametrize("scaling", [Scaling.PER_TENSOR, Scaling.PER_HEAD])
def test_amax_scaling_never_saturates_and_keeps_the_max(scaling: Scaling) -> None:
    gen = torch.Generator().manual_seed(random.getrandbits(31))
    x = torch.randn(32, 3, 16, generator=gen) * torch.tensor([1e-3, 10.0, 5e4]).view(1, 3, 1)
    scale = amax_scale(x, scaling, head_dim=1)
    assert scale.numel() == (1 if scaling is Scaling.PER_TENSOR else 3)
    fq = fake_quant_e4m3(x, scale)
    assert fq.saturated == 0
    # The amax lands on 448 (or within a float32 ulp), so it survives the round trip almost exactly.
    amax = x.abs().amax()
    got = fq.values.abs().amax()
    assert abs(float(got - amax)) <= 1e-6 * float(amax)


def test_per_head_scaling_is_finer_than_per_tensor_for_small_heads() -> None:
    gen = torch.Generator().manual_seed(random.getrandbits(31))
    x = torch.randn(64, 2, 16, generator=gen) * torch.tensor([1e-4, 1e4]).view(1, 2, 1)
    err = {}
    for scaling in (Scaling.PER_TENSOR, Scaling.PER_HEAD):
        out = fake_quant_e4m3(x, amax_scale(x, scaling, head_dim=1)).values
        err[scaling] = float(((out - x)[:, 0].abs() / x[:, 0].abs().amax()).max())
    # With a shared scale the tiny head falls below the subnormal range and is flushed.
    assert err[Scaling.PER_HEAD] < 0.07 < err[Scaling.PER_TENSOR]


def test_zero_and_nonfinite_groups_get_unit_scale() -> None:
    x = torch.zeros(4, 2, 3)
    x[0, 1, 0] = float("inf")
    scale = amax_scale(x, Scaling.PER_HEAD, head_dim=1)
    assert scale.flatten().tolist() == [1.0, 1.0]
    assert amax_scale(torch.zeros(3), Scaling.PER_TENSOR).item() == 1.0


def test_scaling_parse() -> None:
    assert Scaling.parse("per-tensor") is Scaling.PER_TENSOR
    assert Scaling.parse("NONE") is Scaling.NONE
    with pytest.raises(ValueError, match="per_head"):
        Scaling.parse("per_channel")
