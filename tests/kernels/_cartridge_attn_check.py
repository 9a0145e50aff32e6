"""Shared checking code for the CPU (interpreter) and GPU tests of the fused kernel."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from cartridge_attn import AttentionProblem, CartridgeAttention, KernelConfig, reference_attention

RTOL = ATOL = 3e-2
REL_L2_MAX = 1.5e-2
# A fault must move the output far outside the tolerance, not merely graze it.
FAULT_REL_L2_MIN = 5e-2


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
    fault: int = 0,
) -> Outcome:
    """Plan, launch into a NaN-poisoned output, and compare with the fp32 reference."""
    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), mode=mode, config=config, causal=causal, device=pr.q.device, **pr.plan_kwargs())
    out = torch.full_like(pr.q, float("nan"))
    got = attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, _fault=fault, **pr.run_kwargs())
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


def assert_fault_caught(o: Outcome) -> None:
    """The faulty variant must fail the same check a correct kernel passes."""
    assert o.rel_l2 > FAULT_REL_L2_MIN, f"fault not visible: relative L2 error {o.rel_l2:.3e}"
    caught = False
    try:
        assert_matches(o)
    except AssertionError:
        caught = True
    assert caught, "the faulty variant passed the numerics check"


def fault_problem(fault: int, device: torch.device, **shape) -> AttentionProblem:
    """A fresh problem on which fault variant ``fault`` must show.

    A fresh prefill (queries = the whole live suffix, so early queries see one or two live keys and a
    one-position mask shift changes them a lot), live keys scaled up so that live positions carry
    weight next to the cartridge, suffixes longer than a page (stale page index), FP8 values with
    scales other than 1 in both sources, and the last cartridge key scaled up so that the position an
    off-by-one boundary drops carries real weight.
    """
    from cartridge_attn import random_problem

    kw = {"cartridge_v_dtype": torch.float8_e4m3fn, "live_v_dtype": torch.float8_e4m3fn, **shape}
    live_lens = kw.pop("live_lens", [11, 24])
    q_lens = kw.pop("q_lens", live_lens)
    pr = random_problem(q_lens, live_lens, device=device, **kw)
    pr.live_k.mul_(3)
    pr.cartridge_k[-1] *= 6
    return pr
