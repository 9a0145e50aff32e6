"""FlashInfer on the ordinary injection layout: the second oracle of the numerics gate.

The cartridge is copied (V dequantized to BF16) into every request's first pages and FlashInfer's stock
paged kernels run over cartridge + live as one sequence: ``BatchDecodeWithPagedKVCacheWrapper`` when every
request has one query, ``BatchPrefillWithPagedKVCacheWrapper`` (FA3 backend on SM90) otherwise.
"""

from __future__ import annotations

from typing import Any

import torch

from .paging import build_injection_layout
from .problems import AttentionProblem

__all__ = ["flashinfer_injection_attention"]

_WORKSPACE_BYTES = 128 * 1024**2


def flashinfer_injection_attention(pr: AttentionProblem, causal: bool = True) -> torch.Tensor:
    """FlashInfer's output for ``pr`` on the BF16 injection layout, ``(total_q, H_q, D)`` in BF16.

    Raises ImportError when FlashInfer is not installed.
    """
    import flashinfer

    inj = build_injection_layout(
        pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, pr.kv_indptr, pr.kv_indices, pr.kv_last_page_len,
        cartridge_v_scale=pr.cartridge_v_scale, live_v_scale=pr.live_v_scale, dtype=torch.bfloat16,
    )  # fmt: skip
    h_q, d = pr.q.shape[1], pr.q.shape[2]
    h_kv = pr.cartridge_k.shape[1]
    ws = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=pr.q.device)
    q_lens = (pr.qo_indptr[1:] - pr.qo_indptr[:-1]).tolist()
    wrapper: Any
    if all(n == 1 for n in q_lens):
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
        wrapper.plan(
            inj.kv_indptr, inj.kv_indices, inj.kv_last_page_len, h_q, h_kv, d, pr.page_size,
            q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
        )  # fmt: skip
    else:
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa3")
        wrapper.plan(
            pr.qo_indptr, inj.kv_indptr, inj.kv_indices, inj.kv_last_page_len, h_q, h_kv, d, pr.page_size,
            causal=causal, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
        )  # fmt: skip
    out = wrapper.run(pr.q.to(torch.bfloat16), inj.kv_cache)
    torch.cuda.synchronize()
    return out
