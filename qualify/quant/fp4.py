"""FP4 E2M1 fake quantization: the positive control for key damage in the loss gate.

FP8 E4M3 keys are what serving would use, but on a small model they may not move the loss measurably
(SmolLM2-135M's cartridge keys stay below |22|). A gate still has to prove that its measurement can see key
damage, so its control needs a layout that damages keys by a visible amount: E2M1 keeps one mantissa bit and
saturates at 6. Like FP8 it is applied with the gate's scaling mode (scale 1 by default, as served).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

E2M1_MAX = 6.0
# Every non-negative E2M1 value; the grid is symmetric.
_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


@dataclass(frozen=True)
class FakeQuantizedFp4:
    values: torch.Tensor
    saturated: int  # elements with |x / scale| > 6, clipped


def fake_quant_e2m1(x: torch.Tensor, scale: float | torch.Tensor = 1.0) -> FakeQuantizedFp4:
    """Round x / scale to the nearest E2M1 value (ties to the even code, saturating at +-6), times scale.

    NaN stays NaN and is not counted as saturated.
    """
    xf = x.float()
    s = torch.as_tensor(scale, dtype=torch.float32, device=x.device)
    y = xf / s
    saturated = int((y.abs() > E2M1_MAX).sum())
    mag = y.abs().clamp(max=E2M1_MAX).nan_to_num(nan=0.0)
    grid = torch.tensor(_GRID, dtype=torch.float32, device=x.device)
    # Nearest grid value; an exact midpoint goes to the even code (ranks: best and even 0, best and odd 1).
    dist = (mag.unsqueeze(-1) - grid).abs()
    is_best = dist == dist.min(dim=-1, keepdim=True).values
    parity = torch.arange(len(_GRID), device=x.device) % 2
    choice = torch.where(is_best, parity, 2).argmin(dim=-1)
    q = grid[choice] * torch.sign(y) * s
    q = torch.where(torch.isnan(xf), xf, q)
    return FakeQuantizedFp4(values=q.to(x.dtype), saturated=saturated)


def e2m1_amax_scale(x: torch.Tensor, per_head: bool, head_axis: int) -> torch.Tensor:
    """Scale that maps the amax (of the tensor, or of each head) to E2M1's largest value; 1 where amax is 0."""
    xf = x.float().abs().nan_to_num(nan=0.0)
    if per_head:
        dims = tuple(d for d in range(xf.dim()) if d != head_axis % xf.dim())
        amax = xf.amax(dim=dims, keepdim=True)
    else:
        amax = xf.amax()
    return torch.where(amax > 0, amax / E2M1_MAX, torch.ones_like(amax))
