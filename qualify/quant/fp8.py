"""FP8 E4M3 (the "fn" variant: no infinities, max 448) fake quantization and its scales.

The rounding is done arithmetically in float32 rather than through `torch.float8_e4m3fn` so it runs on any
device and torch build, and so the tests can hold it against an independent bit-level reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

E4M3_MAX = 448.0
# Exponent of the smallest normal (2^-6); below it the spacing stays at the subnormal step 2^-9.
_E4M3_MIN_NORMAL_EXP = -6
_E4M3_MANTISSA_BITS = 3


class Scaling(Enum):
    """How a tensor is mapped into the E4M3 range before rounding."""

    NONE = "none"  # scale 1: what a server that stores the cartridge as plain FP8 does
    PER_TENSOR = "per_tensor"  # scale = amax / 448 over the whole tensor
    PER_HEAD = "per_head"  # scale = amax / 448 per KV head

    @classmethod
    def parse(cls, text: str | Scaling) -> Scaling:
        if isinstance(text, Scaling):
            return text
        key = text.strip().lower().replace("-", "_")
        for mode in cls:
            if mode.value == key:
                return mode
        known = ", ".join(m.value for m in cls)
        raise ValueError(f"unknown FP8 scaling {text!r}; known: {known}")


@dataclass(frozen=True)
class FakeQuantized:
    """A tensor after the E4M3 round trip, in the input's dtype, and how many elements hit ±448."""

    values: torch.Tensor
    saturated: int


def fake_quant_e4m3(x: torch.Tensor, scale: float | torch.Tensor = 1.0) -> FakeQuantized:
    """Round `x / scale` to the nearest E4M3 value (ties to even), saturating at ±448, and multiply back.

    NaN stays NaN and is not counted as saturated: a NaN in a cartridge is corruption, and turning it into a
    finite number would let a broken cartridge pass the loss gate. ±inf saturates to ±448 and is counted.
    `scale` is a positive scalar or a tensor broadcastable against `x` (e.g. one scale per head).
    """
    y = x.to(torch.float32) / torch.as_tensor(scale, dtype=torch.float32, device=x.device)
    saturated = int((y.abs() > E4M3_MAX).sum().item())
    y = y.clamp(-E4M3_MAX, E4M3_MAX)  # clamp propagates NaN, which is the behaviour we want
    # frexp gives |y| = m * 2^e with m in [0.5, 1): the binade of y is 2^(e-1).
    _, exponent = torch.frexp(y)
    binade = (exponent - 1).clamp_min(_E4M3_MIN_NORMAL_EXP)
    step = torch.exp2((binade - _E4M3_MANTISSA_BITS).to(torch.float32))
    # y / step is exact (power-of-two division) and torch.round rounds half to even, so this is RNE.
    q = torch.round(y / step) * step
    out = q * torch.as_tensor(scale, dtype=torch.float32, device=x.device)
    return FakeQuantized(values=out.to(x.dtype), saturated=saturated)


def amax_scale(x: torch.Tensor, scaling: Scaling, head_dim: int = 1) -> torch.Tensor:
    """The scale that maps `x`'s absolute maximum onto 448, shaped to broadcast against `x`.

    For `PER_HEAD`, `head_dim` is the axis of the KV heads in `x` (1 for the (T, H_kv, D) cartridge layout).
    A group that is all zero gets scale 1 (any scale reproduces zeros, and 0 would divide by zero); so does a
    group holding inf, whose amax scale would flush every finite element to zero and hide the problem.
    """
    if scaling is Scaling.NONE:
        return torch.ones((), dtype=torch.float32, device=x.device)
    ax = x.detach().to(torch.float32).abs()
    if scaling is Scaling.PER_TENSOR:
        amax = ax.amax()
    else:
        dims = [d for d in range(x.dim()) if d != head_dim]
        amax = ax.amax(dim=dims, keepdim=True)
    usable = (amax > 0) & torch.isfinite(amax)
    scale = torch.where(usable, amax / E4M3_MAX, torch.ones_like(amax))
    # amax / (amax / 448) can land one ulp above 448 and be miscounted as saturated; nudge the scale up.
    over = usable & ((amax / scale) > E4M3_MAX)
    return torch.where(over, torch.nextafter(scale, torch.full_like(scale, float("inf"))), scale)
