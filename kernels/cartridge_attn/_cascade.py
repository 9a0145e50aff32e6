"""Decode's cascade launch: every request's query rows over the shared cartridge, many requests per tile (Triton).

The fused decode kernel walks the cartridge once per (request, KV head), or per few packed requests: at batch 64
the same cartridge tile crosses the L2 to the SMs 32 times per KV head, and each program's dependent chain of
tiles is as long as the cartridge. Here one tile of rows holds the decode queries of ``BLOCK_M // GROUP``
requests (every row sees the whole cartridge, so no mask but the range's end), the cartridge is split into
``CART_SPLITS`` ranges over as many programs, and each program writes its rows' unnormalized online-softmax
state. The fused kernel's next launch (``CART_STATES``) walks the live pages only and merges these states into each
row's state at its end: one softmax per row, exact up to the order of additions. With ``cart_pdl`` that launch is
this one's programmatic dependent, so the live walk runs while the cartridge is being attended.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._kernel import _attend

__all__ = ["cartridge_cascade_kernel"]


# The batch is not specialized, for the reason the fused kernel gives (`_kernel.cartridge_attn_kernel`).
@triton.jit(do_not_specialize=["num_reqs"])
def cartridge_cascade_kernel(
    q_ptr,
    ck_ptr,
    cv_ptr,
    cv_scale_ptr,
    cart_o_ptr,
    cart_ml_ptr,
    num_reqs,
    cart_len,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_ckt,
    stride_ckh,
    stride_cvt,
    stride_cvh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CART_SPLITS: tl.constexpr,
    CV_FP8: tl.constexpr,
    DOT_F32: tl.constexpr,
    LAUNCH_DEPENDENTS: tl.constexpr = False,
):
    if LAUNCH_DEPENDENTS:
        # The live walk (a programmatic dependent launch) may start once every program here has begun: it reads
        # these states only after waiting for this launch to end.
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    num_heads = tl.num_programs(1) * GROUP
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # Row g of a KV head is (request g // GROUP, its head g % GROUP): any group size packs without padding.
    g = pid * BLOCK_M + offs_m
    row_ok = g < num_reqs * GROUP
    req = g // GROUP
    heads = kvh * GROUP + g % GROUP
    q = tl.load(
        q_ptr + req[:, None].to(tl.int64) * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    cv_scale = tl.load(cv_scale_ptr + kvh)
    # Tile-aligned ranges; a range past the end is empty and leaves its state empty (max -inf, sum 0).
    chunk = tl.cdiv(tl.cdiv(cart_len, CART_SPLITS), BLOCK_N) * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, cart_len)
    ck_base = ck_ptr + kvh * stride_ckh
    cv_base = cv_ptr + kvh * stride_cvh
    for start in tl.range(lo, hi, BLOCK_N):
        pos = start + offs_n
        ok = pos < hi
        k = tl.load(ck_base + pos[:, None] * stride_ckt + offs_d[None, :], mask=ok[:, None], other=0.0)
        v = tl.load(cv_base + pos[:, None] * stride_cvt + offs_d[None, :], mask=ok[:, None], other=0.0)
        acc, m_i, l_i = _attend(acc, m_i, l_i, q, k, v, ok[None, :], cv_scale, qk_scale, True, CV_FP8, False, DOT_F32)
    if CV_FP8:
        acc = acc * cv_scale
    # State `split` of row (req, head): the layout `_kernel._fold_states` reads.
    state_rows = num_reqs * num_heads
    rows = req * num_heads + heads
    tl.store(cart_o_ptr + (split * state_rows + rows).to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :], acc,
             mask=row_ok[:, None])  # fmt: skip
    tl.store(cart_ml_ptr + 2 * split * state_rows + rows, m_i, mask=row_ok)
    tl.store(cart_ml_ptr + (2 * split + 1) * state_rows + rows, l_i, mask=row_ok)
