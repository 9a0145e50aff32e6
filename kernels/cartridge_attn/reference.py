"""fp32 PyTorch reference: cartridge and live suffix concatenated, GQA, bottom-right causal mask.

This is the definition the kernel is checked against, written for clarity rather than speed: one
request at a time, the logical sequence materialised, ordinary softmax (no online rescaling).
"""

from __future__ import annotations

import math

import torch

from .paging import dequantize_v, gather_live, live_lengths

__all__ = ["reference_attention"]


def reference_attention(
    q: torch.Tensor,
    cartridge_k: torch.Tensor,
    cartridge_v: torch.Tensor,
    live_k: torch.Tensor,
    live_v: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_len: torch.Tensor,
    *,
    cartridge_v_scale: torch.Tensor | None = None,
    live_v_scale: torch.Tensor | None = None,
    sm_scale: float | None = None,
    causal: bool = True,
    precision: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Attention of each request's queries over ``cartridge ++ live``, in fp32 (the definition the kernel is
    held to) or, with ``precision=torch.float64``, the same arithmetic in double as an error yardstick.

    Parameters
    ----------
    q : torch.Tensor
        ``(total_q, H_q, D)``; request ``b``'s queries are rows ``qo_indptr[b]:qo_indptr[b + 1]``.
    cartridge_k, cartridge_v : torch.Tensor
        ``(T_c, H_kv, D)``; V may be FP8 E4M3.
    live_k, live_v : torch.Tensor
        ``(num_pages, page_size, H_kv, D)`` live pages; V may be FP8 E4M3.
    qo_indptr, kv_indptr, kv_indices, kv_last_page_len : torch.Tensor
        Query offsets and the live page table (see :mod:`cartridge_attn.paging`).
    cartridge_v_scale, live_v_scale : torch.Tensor or None
        ``(H_kv,)`` per-head V scales; None means 1.
    sm_scale : float or None
        Softmax scale; ``1 / sqrt(D)`` when None.
    causal : bool
        Bottom-right aligned causal mask over the live suffix: query ``t`` of ``n`` queries, with ``L``
        live tokens, sees live tokens ``0 .. L - n + t`` and every cartridge position.
    precision : torch.dtype
        ``torch.float32`` (default) or ``torch.float64``.

    Returns
    -------
    torch.Tensor
        ``(total_q, H_q, D)`` in ``precision``.
    """
    if precision not in (torch.float32, torch.float64):
        raise ValueError(f"precision must be float32 or float64, not {precision}")
    total_q, h_q, d = q.shape
    h_kv = cartridge_k.shape[1]
    group = h_q // h_kv
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    page_size = live_k.shape[1]
    lens = live_lengths(kv_indptr.cpu(), kv_last_page_len.cpu(), page_size)
    qo = qo_indptr.cpu()
    ck = cartridge_k.to(precision)
    cv = dequantize_v(cartridge_v, cartridge_v_scale, precision)
    t_c = ck.shape[0]
    out = torch.empty((total_q, h_q, d), dtype=precision, device=q.device)
    for b in range(qo.numel() - 1):
        q0, q1 = int(qo[b]), int(qo[b + 1])
        n, length = q1 - q0, int(lens[b])
        if n == 0:
            continue
        lk = gather_live(live_k, kv_indptr.cpu(), kv_indices.cpu(), b, length).to(precision)
        lv = dequantize_v(gather_live(live_v, kv_indptr.cpu(), kv_indices.cpu(), b, length), live_v_scale, precision)
        k = torch.cat([ck, lk], 0).repeat_interleave(group, dim=1)  # (T, H_q, D)
        v = torch.cat([cv, lv], 0).repeat_interleave(group, dim=1)
        qb = q[q0:q1].to(precision)
        s = torch.einsum("qhd,khd->hqk", qb, k) * scale
        if causal:
            t = torch.arange(n, device=q.device)[:, None]
            j = torch.arange(t_c + length, device=q.device)[None, :] - t_c
            visible = (j < 0) | (j <= length - n + t)
            s = s.masked_fill(~visible[None], float("-inf"))
        out[q0:q1] = torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v)
    return out
