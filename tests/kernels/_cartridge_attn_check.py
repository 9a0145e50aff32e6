"""Shared checking code for the CPU (interpreter) and GPU tests of the fused kernel."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from cartridge_attn import (
    AttentionProblem,
    CartridgeAttention,
    KernelConfig,
    poison_cascade_states,
    reference_attention,
)

RTOL = ATOL = 3e-2
REL_L2_MAX = 1.5e-2


@dataclass
class Outcome:
    out: torch.Tensor
    ref: torch.Tensor
    rel_l2: float
    max_abs: float
    attn: CartridgeAttention


def run_fused(
    pr: AttentionProblem,
    *,
    mode: str = "auto",
    config: KernelConfig | None = None,
    causal: bool = True,
) -> Outcome:
    """Plan, launch into a NaN-poisoned output, and compare with the fp32 reference."""
    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), mode=mode, config=config, causal=causal, device=pr.q.device, **pr.plan_kwargs())
    out = torch.full_like(pr.q, float("nan"))
    poison_cascade_states(attn)
    got = attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())
    assert got is out, "run must write into the caller's buffer"
    if pr.q.is_cuda:
        torch.cuda.synchronize()
    ref = reference_attention(
        pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(), causal=causal, **pr.run_kwargs()
    )
    diff = (out.float() - ref).nan_to_num(nan=float("inf"))
    rel = float(diff.norm() / ref.norm())
    return Outcome(out=out, ref=ref, rel_l2=rel, max_abs=float(diff.abs().max()), attn=attn)


def assert_matches(o: Outcome) -> None:
    """No NaN (a poisoned element left unwritten shows up here), elementwise and relative-L2 bounds."""
    assert not torch.isnan(o.out).any(), "NaN in the output (unwritten element or bad arithmetic)"
    assert torch.isfinite(o.ref).all()
    torch.testing.assert_close(o.out.float(), o.ref, rtol=RTOL, atol=ATOL)
    assert o.rel_l2 < REL_L2_MAX, f"relative L2 error {o.rel_l2:.3e} >= {REL_L2_MAX}"
