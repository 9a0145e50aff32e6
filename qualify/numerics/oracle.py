"""What the fused kernel is compared with: the fp32 reference, and oracles that check the reference itself.

The fp32 reference (`cartridge_attn.reference_attention`) is the definition the kernel is held to. Two
oracles keep that definition honest: an independent float64 attention over the ordinary injection layout
(host-only, written without the reference's helpers) and, on CUDA hosts, FlashInfer on the same layout.
"""

from __future__ import annotations

import importlib.util
import math
from typing import TYPE_CHECKING, Any

import torch

from qualify.errors import QualifyError

if TYPE_CHECKING:
    from qualify.numerics.cell import KernelNumericsParams

SECOND_ORACLE_NAME = "flashinfer-injection-bf16"


def fp32_reference(pr: Any) -> torch.Tensor:
    """`reference_attention` of problem `pr`, ``(total_q, H_q, D)`` float32."""
    import cartridge_attn

    return cartridge_attn.reference_attention(
        pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(), **pr.run_kwargs()
    )


def float64_reference(pr: Any) -> torch.Tensor:
    """The reference's arithmetic in float64: the yardstick the kernel and the accepted oracle are measured by."""
    import cartridge_attn

    return cartridge_attn.reference_attention(
        pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(), precision=torch.float64,
        **pr.run_kwargs(),
    )  # fmt: skip


def rounded_reference(pr: Any) -> torch.Tensor:
    """What an exact implementation stores: the fp32 reference rounded to the output dtype (the oracle when
    FlashInfer does not run)."""
    return fp32_reference(pr).to(pr.q.dtype)


def injection_layout_f64(pr: Any) -> Any:
    """The ordinary injection layout of `pr` (cartridge copied into every request's pages), float64."""
    from cartridge_attn import build_injection_layout

    return build_injection_layout(
        pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, pr.kv_indptr, pr.kv_indices,
        pr.kv_last_page_len, cartridge_v_scale=pr.cartridge_v_scale, live_v_scale=pr.live_v_scale,
        dtype=torch.float64,
    )  # fmt: skip


def independent_attention(pr: Any, inj: Any) -> torch.Tensor:
    """float64 attention over the injection layout `inj`, written without the reference's helpers.

    One query and head at a time, bottom-right causal over each request's whole sequence (so the cartridge,
    which precedes every live token, is always visible). Returns ``(total_q, H_q, D)`` float64 on the host.
    """
    cache = inj.kv_cache.double()
    ps = cache.shape[2]
    h_q = pr.q.shape[1]
    h_kv = cache.shape[3]
    d = pr.q.shape[2]
    out = torch.empty(pr.q.shape, dtype=torch.float64)
    qo = pr.qo_indptr.tolist()
    indptr = inj.kv_indptr.tolist()
    for b in range(len(qo) - 1):
        pages = inj.kv_indices[indptr[b] : indptr[b + 1]].long()
        n_tok = (len(pages) - 1) * ps + int(inj.kv_last_page_len[b])
        k = cache[pages, 0].reshape(-1, h_kv, d)[:n_tok]
        v = cache[pages, 1].reshape(-1, h_kv, d)[:n_tok]
        q = pr.q[qo[b] : qo[b + 1]].double()
        n_q = q.shape[0]
        for t in range(n_q):
            visible = n_tok - n_q + t + 1  # bottom-right causal over the whole sequence; cartridge always visible
            for h in range(h_q):
                kh = k[:visible, h // (h_q // h_kv)]
                s = (kh @ q[t, h]) / math.sqrt(d)
                w = torch.softmax(s, dim=0)
                out[qo[b] + t, h] = w @ v[:visible, h // (h_q // h_kv)]
    return out


def want_second_oracle(p: KernelNumericsParams, device: torch.device) -> bool:
    """Whether FlashInfer runs as a second oracle: CUDA only; `flashinfer` demands it, `auto` uses it if there."""
    if p.second_oracle == "none" or device.type != "cuda":
        return False
    have = importlib.util.find_spec("flashinfer") is not None
    if p.second_oracle == "flashinfer" and not have:
        raise QualifyError("second_oracle: flashinfer was required but FlashInfer is not installed")
    return have


def flashinfer_oracle(pr: Any) -> torch.Tensor:
    """FlashInfer's causal output for `pr` on the BF16 injection layout (CUDA, FlashInfer installed)."""
    from cartridge_attn.baselines import flashinfer_injection_attention

    return flashinfer_injection_attention(pr, causal=True)
