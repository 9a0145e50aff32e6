"""The fused prefill's second implementation, in Gluon (Triton's explicit-layout dialect), for SM90.

Same contract as `_kernel.cartridge_attn_kernel` in prefill mode: one online softmax per (query token, GQA head)
row from the first cartridge position to the last visible live token, the dense cartridge first and then the
paged live suffix, bottom-right causal mask, the plan's tiles (``tile_req`` / ``tile_row``) and rows that pack
GQA heads (row ``r`` is query token ``r // G``, head ``r % G``). What it adds is what Triton 3.6 would not give
the Triton kernel (Nsight Compute of both against FA3, results/2026-12-04-decode-targets-h200):

* **A producer warp** issues every load through the tensor memory accelerator into rings of ``STAGES`` shared
  buffers: the cartridge as boxes of ``BLOCK_N`` rows of one head, the live suffix page by page into row slices
  of the same buffers. K and V stages have barriers of their own. The math warps compute no addresses and issue
  no loads.
* **Two consumer warpgroups**, each a partition of its own over 64 rows of the 128-row tile; nothing in the
  loop synchronizes the whole CTA. Each releases a stage on its own (a stage's "empty" barrier counts both).
* **QK^T as one wgmma of N = BLOCK_N** per warpgroup: without the load addresses, a warpgroup's registers hold a
  64 x 128 score tile (the Triton kernel's 255 registers forced N = 32).
* **Software pipelining inside each warpgroup** (as FA3 does): tile j's QK^T and tile j - 1's PV are issued
  together and tile j's softmax runs while the PV does, so the tensor cores are not idle through every softmax.
  A K stage is released once its QK^T is done, a tile before the V stage, so the producer refills K early.
  The first version (results/2026-12-05-gluon-prefill-h200) waited for each wgmma and stalled on it.

A 16-bit V stage feeds the PV wgmma directly. An FP8 stage is converted to FP16 in shared memory first (exact,
one instruction per pair; P is then FP16, as in the Triton kernel): each warpgroup converts its half of the
rows after the tile's softmax, and the halves meet at a "converted" barrier before the next step issues the PV.
The live suffix's last tile is ragged: its slots past the request's ``kv_len`` hold whatever the cache holds
there (NaN included), and P = 0 times NaN is NaN, so those V rows are zeroed in shared memory the same way (a
TMA box cannot be masked).

Buffers: K ``[STAGES, BLOCK_N, D]``; cartridge V in its dtype; live V in its dtype (the same ring when the two
dtypes agree); FP16 staging for converted FP8 (the live V ring itself when live V is 16-bit: a stage's live
buffer is idle while the stage holds a cartridge tile, and its release covers both).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

ROWS_PER_CONSUMER = gl.constexpr(64)  # one warpgroup's wgmma rows (M = 64 per warpgroup on SM90)
PRODUCER_WARPS = gl.constexpr(1)
PRODUCER_REGISTERS = gl.constexpr(24)  # the producer holds scalars only: setmaxnreg's floor


# ---------------------------------------------------------------------------------------------------
# Layouts (one consumer warpgroup: 4 warps).
# ---------------------------------------------------------------------------------------------------
@gluon.constexpr_function
def _score_layout(block_n):
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, block_n, 16])


@gluon.constexpr_function
def _out_layout(head_dim):
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, head_dim, 16])


@gluon.constexpr_function
def _rows_layout(head_dim, elem_bits):
    # 16-byte vectors along D, the rest of the warp along rows.
    per_thread = 128 // elem_bits
    across = head_dim // per_thread
    return gl.BlockedLayout([1, per_thread], [32 // across, across], [4, 1], [1, 0])


# ---------------------------------------------------------------------------------------------------
# Producer: one warp, TMA only.
# ---------------------------------------------------------------------------------------------------
@gluon.jit
def _acquire(empty, ready, i, nbytes: gl.constexpr, STAGES: gl.constexpr):
    """Waits until stage i % STAGES is free (every consumer released its previous tile) and arms its "ready"
    barrier for nbytes; returns that barrier, which the stage's copies complete."""
    s = i % STAGES
    mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
    bar = ready.index(s)
    mbarrier.expect(bar, nbytes)
    return bar


@gluon.jit
def _page_row(pages, lanes, p: gl.constexpr, page_rows):
    """Row of the 2-D live view where the tile's page p starts."""
    row = gl.sum(gl.where(lanes == p, pages, 0), axis=0) * page_rows
    return row


@gluon.jit
def _producer(
    descs,
    rings,
    bars,
    kv_indices_ptr,
    walk,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    PAGE: gl.constexpr,
    STAGES: gl.constexpr,
    K_BYTES: gl.constexpr,
    CV_BYTES: gl.constexpr,
    LK_BYTES: gl.constexpr,
    LV_BYTES: gl.constexpr,
):
    ck_desc, cv_desc, lk_desc, lv_desc = descs
    k_ring, cv_ring, lv_ring = rings
    k_ready, k_empty, v_ready, v_empty = bars
    page0, n_pages, cart_len, n_live, kvh, page_rows = walk
    col = kvh * HEAD_DIM
    n_cart = gl.cdiv(cart_len, BLOCK_N)
    # K before V within a tile: the consumers release K a tile earlier than V, so a K stage is never queued
    # behind a V stage that frees later.
    for i in range(n_cart):
        s = i % STAGES
        # A partial last box is zero-filled past T_c by the TMA unit and still counts its full bytes.
        bar = _acquire(k_empty, k_ready, i, K_BYTES, STAGES)
        tma.async_copy_global_to_shared(ck_desc, [i * BLOCK_N, col], bar, k_ring.index(s))
        bar = _acquire(v_empty, v_ready, i, CV_BYTES, STAGES)
        tma.async_copy_global_to_shared(cv_desc, [i * BLOCK_N, col], bar, cv_ring.index(s))
    PAGES: gl.constexpr = BLOCK_N // PAGE
    lanes = gl.arange(0, PAGES, gl.BlockedLayout([1], [32], [1], [0]))
    for t in range(n_live):
        # The tile's page numbers are read before waiting for a free stage, so that their global-memory latency
        # overlaps the wait instead of preceding the copies. Pages past the request's last one repeat that page: the
        # expected byte count is a constant, so every slice is filled (the consumers mask those columns and zero
        # their V rows).
        pages = gl.load(kv_indices_ptr + page0 + gl.minimum(t * PAGES + lanes, n_pages - 1))
        i = n_cart + t
        s = i % STAGES
        bar = _acquire(k_empty, k_ready, i, LK_BYTES, STAGES)
        k_dst = k_ring.index(s)
        for p in gl.static_range(PAGES):
            tma.async_copy_global_to_shared(lk_desc, [_page_row(pages, lanes, p, page_rows), col], bar,
                                            k_dst.slice(p * PAGE, PAGE))  # fmt: skip
        bar = _acquire(v_empty, v_ready, i, LV_BYTES, STAGES)
        v_dst = lv_ring.index(s)
        for p in gl.static_range(PAGES):
            tma.async_copy_global_to_shared(lv_desc, [_page_row(pages, lanes, p, page_rows), col], bar,
                                            v_dst.slice(p * PAGE, PAGE))  # fmt: skip


# ---------------------------------------------------------------------------------------------------
# Consumer: one warpgroup, 64 rows.
# ---------------------------------------------------------------------------------------------------
@gluon.jit
def _stage_v(
    src,
    dst,
    conv,
    conv_n,
    first_pos,
    valid_end,
    wg: gl.constexpr,
    CONSUMERS: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
):
    """This warpgroup's share of a V stage, converted to ``dst``'s dtype with rows at positions >= valid_end
    zeroed; returns once every consumer's share is in shared memory."""
    SHARE: gl.constexpr = BLOCK_N // CONSUMERS
    lay: gl.constexpr = _rows_layout(HEAD_DIM, src.dtype.primitive_bitwidth)
    x = src.slice(wg * SHARE, SHARE).load(lay)
    pos = first_pos + wg * SHARE + gl.arange(0, SHARE, gl.SliceLayout(1, lay))
    x = gl.where((pos < valid_end)[:, None], x.to(dst.dtype), 0.0)
    if src.dtype == dst.dtype:
        out_lay: gl.constexpr = lay
    else:
        out_lay: gl.constexpr = _rows_layout(HEAD_DIM, dst.dtype.primitive_bitwidth)
    dst.slice(wg * SHARE, SHARE).store(gl.convert_layout(x, out_lay))
    # Generic-proxy stores, read next by the wgmma's async proxy; then this warpgroup's share is complete.
    fence_async_shared()
    gl.thread_barrier()  # bar.sync over this partition's warps only
    bar = conv.index(conv_n % 2)
    mbarrier.arrive(bar, count=1)
    mbarrier.wait(bar, (conv_n // 2) & 1)
    return conv_n + 1


@gluon.jit
def _prepare_v(
    i,
    conv_n,
    v_ring,
    st_ring,
    v_ready,
    conv,
    first_pos,
    valid_end,
    wg: gl.constexpr,
    STAGE: gl.constexpr,  # 0: V as loaded; 1: FP8 converted into st_ring; 2: zero past valid_end in place if ragged
    CONSUMERS: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
):
    """Waits for tile i's V and readies it for the PV wgmma, which the next tile's step issues. Writing the stage
    is safe: its "ready" barrier completed only after the producer found it released by both consumers, each
    after its PV wgmma of the tile STAGES back."""
    s = i % STAGES
    mbarrier.wait(v_ready.index(s), (i // STAGES) & 1)
    if STAGE == 1:
        conv_n = _stage_v(v_ring.index(s), st_ring.index(s), conv, conv_n, first_pos, valid_end,
                          wg, CONSUMERS, BLOCK_N, HEAD_DIM)  # fmt: skip
    elif STAGE == 2:
        v = v_ring.index(s)
        if first_pos + BLOCK_N > valid_end:
            conv_n = _stage_v(v, v, conv, conv_n, first_pos, valid_end, wg, CONSUMERS, BLOCK_N, HEAD_DIM)
    return conv_n


@gluon.jit
def _release(bar):
    # Every warp of the warpgroup has passed its wgmma wait before the one arrival that counts this consumer.
    gl.thread_barrier()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _rescale(acc, alpha, o_layout: gl.constexpr):
    return acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]


@gluon.jit
def _softmax(
    scores,
    m_i,
    l_i,
    first_pos,
    limit,
    masked,
    v_scale,
    qk_scale,
    SCALE_P: gl.constexpr,
    BLOCK_N: gl.constexpr,
):
    """One tile's online-softmax step on its scores, in FP32 registers no wgmma reads: P, the new running max and
    sum, and the factor the accumulator is rescaled by once the previous tile's PV is complete."""
    s_layout: gl.constexpr = _score_layout(BLOCK_N)
    if masked:
        pos = first_pos + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
        scores = gl.where(pos[None, :] <= limit[:, None], scores, float("-inf"))
    # Scaled log2 units, as in the Triton kernel: the cartridge comes first and every row sees position 0, so
    # m_i is finite before any fully masked tile.
    m_new = gl.maximum(m_i, gl.max(scores, 1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(scores * qk_scale - m_new[:, None])
    l_i = l_i * alpha + gl.sum(p, 1)
    if SCALE_P:
        p = p * v_scale
    return p, m_new, l_i, alpha


@gluon.jit
def _operand(p, v_dtype: gl.constexpr, o_layout: gl.constexpr):
    """P as the PV wgmma's register operand. Only once the previous PV is complete: its operand registers are the
    ones this writes, and converting earlier would make ptxas wait for that PV before the whole softmax (seen in
    the SASS), which is what the pipelining is for."""
    return gl.convert_layout(p.to(v_dtype), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))


@gluon.jit
def _walk(
    i0,
    n,
    n_full,
    conv_n,
    acc,
    m_i,
    l_i,
    q_smem,
    k_ring,
    v_ring,
    st_ring,
    bars,
    limit,
    valid_end,
    v_scale,
    qk_scale,
    wg: gl.constexpr,
    STAGE: gl.constexpr,
    SCALE_P: gl.constexpr,
    CONSUMERS: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
):
    """Tiles i0 .. i0 + n - 1 of one source (n >= 1), at positions t * BLOCK_N; tiles from n_full on are masked.

    Software-pipelined within the warpgroup: tile t's QK^T wgmma and tile t - 1's PV wgmma are issued together,
    and tile t's softmax runs while the PV wgmma does. K stages are released as soon as their QK^T is done, V
    stages once their PV is.
    """
    k_ready, k_empty, v_ready, v_empty, conv = bars
    s_layout: gl.constexpr = _score_layout(BLOCK_N)
    o_layout: gl.constexpr = _out_layout(HEAD_DIM)
    pv_ring = st_ring if STAGE == 1 else v_ring
    zeros = gl.zeros([ROWS_PER_CONSUMER, BLOCK_N], gl.float32, s_layout)

    # Tile 0: nothing to overlap with.
    s = i0 % STAGES
    mbarrier.wait(k_ready.index(s), (i0 // STAGES) & 1)
    scores = warpgroup_mma(q_smem, k_ring.index(s).permute((1, 0)), zeros, use_acc=False, is_async=True)
    scores = warpgroup_mma_wait(num_outstanding=0, deps=(scores,))
    _release(k_empty.index(s))
    p, m_i, l_i, alpha = _softmax(scores, m_i, l_i, 0, limit, n_full == 0, v_scale, qk_scale, SCALE_P, BLOCK_N)
    p_op = _operand(p, pv_ring.dtype, o_layout)
    acc = _rescale(acc, alpha, o_layout)
    conv_n = _prepare_v(i0, conv_n, v_ring, st_ring, v_ready, conv, 0, valid_end,
                        wg, STAGE, CONSUMERS, BLOCK_N, HEAD_DIM, STAGES)  # fmt: skip

    for t in range(1, n):
        i = i0 + t
        s = i % STAGES
        prev = (i - 1) % STAGES
        mbarrier.wait(k_ready.index(s), (i // STAGES) & 1)
        scores = warpgroup_mma(q_smem, k_ring.index(s).permute((1, 0)), zeros, use_acc=False, is_async=True)
        acc = warpgroup_mma(p_op, pv_ring.index(prev), acc, is_async=True)
        # wgmma groups retire in order: one left outstanding is the PV, so the scores are complete.
        scores = warpgroup_mma_wait(num_outstanding=1, deps=(scores,))
        _release(k_empty.index(s))
        p, m_new, l_i, alpha = _softmax(scores, m_i, l_i, t * BLOCK_N, limit, t >= n_full, v_scale, qk_scale,
                                        SCALE_P, BLOCK_N)  # fmt: skip
        if CONSUMERS == 2:
            # Tile t's V is readied before the PV wait, not after: ptxas hoists that wait to the top of the basic
            # block holding the softmax (no softmax overlapped the PV in the SASS), and the V stage's mbarrier wait
            # loop is a block boundary it does not cross. Its stage is not the one the PV in flight reads
            # (s != prev). A lone consumer on 232 registers spills in its loop that way (92 bytes against 52), so
            # it keeps the order below.
            conv_n = _prepare_v(i, conv_n, v_ring, st_ring, v_ready, conv, t * BLOCK_N, valid_end,
                                wg, STAGE, CONSUMERS, BLOCK_N, HEAD_DIM, STAGES)  # fmt: skip
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        _release(v_empty.index(prev))
        p_op = _operand(p, pv_ring.dtype, o_layout)
        acc = _rescale(acc, alpha, o_layout)
        m_i = m_new
        if CONSUMERS == 1:
            conv_n = _prepare_v(i, conv_n, v_ring, st_ring, v_ready, conv, t * BLOCK_N, valid_end,
                                wg, STAGE, CONSUMERS, BLOCK_N, HEAD_DIM, STAGES)  # fmt: skip

    last = (i0 + n - 1) % STAGES
    acc = warpgroup_mma(p_op, pv_ring.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    _release(v_empty.index(last))
    return acc, m_i, l_i, conv_n


@gluon.jit
def _consumer(
    wg: gl.constexpr,
    io,
    rings,
    bars,
    q_ring,
    tile,
    strides,
    GROUP: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    CONSUMERS: gl.constexpr,
    CAUSAL: gl.constexpr,
    CV_FP8: gl.constexpr,
    LV_FP8: gl.constexpr,
):
    q_ptr, o_ptr, cv_scale_ptr, lv_scale_ptr = io
    k_ring, cv_ring, lv_ring, st_ring = rings
    rows0, q_start, q_len, kv_len, cart_len, n_live, kvh, qk_scale = tile
    stride_qt, stride_qh, stride_ot, stride_oh = strides
    s_layout: gl.constexpr = _score_layout(BLOCK_N)
    o_layout: gl.constexpr = _out_layout(HEAD_DIM)
    M: gl.constexpr = ROWS_PER_CONSUMER
    row0 = rows0 + wg * M

    # Q rows of this warpgroup into shared memory, once.
    q_lay: gl.constexpr = _rows_layout(HEAD_DIM, 16)
    gr = row0 + gl.arange(0, M, gl.SliceLayout(1, q_lay))
    tok = gr // GROUP
    head = kvh * GROUP + gr % GROUP
    d = gl.arange(0, HEAD_DIM, gl.SliceLayout(0, q_lay))
    q_off = (q_start + tok)[:, None].to(gl.int64) * stride_qt + head[:, None] * stride_qh + d[None, :]
    q = gl.load(q_ptr + q_off, mask=(tok < q_len)[:, None], other=0.0)
    q_smem = q_ring.index(wg)
    q_smem.store(q)
    fence_async_shared()
    gl.thread_barrier()

    # Per-row causal limits (bottom-right: query t of n sees live positions 0 .. kv_len - n + t).
    tok_s = (row0 + gl.arange(0, M, gl.SliceLayout(1, s_layout))) // GROUP
    if CAUSAL:
        limit = kv_len - q_len + tok_s
        live_all = kv_len - q_len + row0 // GROUP + 1  # live positions every row of this warpgroup sees
    else:
        limit = kv_len - 1 + tok_s * 0
        live_all = kv_len
    m_i = gl.full([M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([M], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([M, HEAD_DIM], gl.float32, o_layout)
    conv_n = 0

    # ---- cartridge: full tiles, then the ragged one (its box is zero-filled past T_c) ----
    n_cart = gl.cdiv(cart_len, BLOCK_N)
    cart_limit = cart_len - 1 + tok_s * 0
    acc, m_i, l_i, conv_n = _walk(
        0, n_cart, cart_len // BLOCK_N, conv_n, acc, m_i, l_i, q_smem, k_ring, cv_ring, st_ring, bars, cart_limit,
        cart_len, 1.0, qk_scale, wg, 1 if CV_FP8 else 0, False, CONSUMERS, BLOCK_N, HEAD_DIM, STAGES,
    )  # fmt: skip
    # The cartridge's per-head V scale is constant over the cartridge: applied once to the accumulator.
    if CV_FP8:
        acc = acc * gl.load(cv_scale_ptr + kvh)

    # ---- live suffix: tiles every row of this warpgroup sees in full, then masked ones ----
    # Which tiles are staged must agree between the consumers (they meet at the "converted" barrier): FP8 live V
    # stages every tile; 16-bit live V only the ragged one, decided from kv_len, the same for both.
    lv_scale = gl.load(lv_scale_ptr + kvh)
    # Capped at kv_len so that a full tile is never the ragged one (a warpgroup of padding rows sees past q_len).
    n_live_full = gl.minimum(gl.minimum(gl.maximum(live_all, 0), kv_len) // BLOCK_N, n_live)
    # The plan guarantees a live token per request (kv_len >= q_len >= 1); a block table from an engine that broke
    # that promise must not leave a consumer waiting for a tile the producer never loads.
    if n_live > 0:
        acc, m_i, l_i, conv_n = _walk(
            n_cart, n_live, n_live_full, conv_n, acc, m_i, l_i, q_smem, k_ring, lv_ring, st_ring, bars, limit,
            kv_len, lv_scale, qk_scale, wg, 1 if LV_FP8 else 2, LV_FP8, CONSUMERS, BLOCK_N, HEAD_DIM, STAGES,
        )  # fmt: skip

    out = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    gr_o = row0 + gl.arange(0, M, gl.SliceLayout(1, o_layout))
    tok_o = gr_o // GROUP
    head_o = kvh * GROUP + gr_o % GROUP
    d_o = gl.arange(0, HEAD_DIM, gl.SliceLayout(0, o_layout))
    o_off = (q_start + tok_o)[:, None].to(gl.int64) * stride_ot + head_o[:, None] * stride_oh + d_o[None, :]
    gl.store(o_ptr + o_off, out.to(o_ptr.dtype.element_ty), mask=(tok_o < q_len)[:, None])


# ---------------------------------------------------------------------------------------------------
# The kernel.
# ---------------------------------------------------------------------------------------------------
@gluon.jit
def cartridge_prefill_ws_kernel(
    q_ptr,
    o_ptr,
    ck_desc,
    cv_desc,
    lk_desc,
    lv_desc,
    cv_scale_ptr,
    lv_scale_ptr,
    qo_indptr_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    kv_len_ptr,
    tile_req_ptr,
    tile_row_ptr,
    cart_len,
    qk_scale,
    page_rows,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    GROUP: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    PAGE: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    CONSUMER_REGISTERS: gl.constexpr,
):
    pid = gl.program_id(0)
    kvh = gl.program_id(1)
    CONSUMERS: gl.constexpr = BLOCK_M // ROWS_PER_CONSUMER
    CV_FP8: gl.constexpr = cv_desc.dtype.primitive_bitwidth == 8
    LV_FP8: gl.constexpr = lv_desc.dtype.primitive_bitwidth == 8

    req = gl.load(tile_req_ptr + pid)
    rows0 = gl.load(tile_row_ptr + pid)
    q_start = gl.load(qo_indptr_ptr + req)
    q_len = gl.load(qo_indptr_ptr + req + 1) - q_start
    kv_len = gl.load(kv_len_ptr + req)
    page0 = gl.load(kv_indptr_ptr + req)
    tok_hi = gl.minimum((rows0 + BLOCK_M - 1) // GROUP, q_len - 1)
    if CAUSAL:  # noqa: SIM108
        live_end = kv_len - q_len + tok_hi + 1
    else:
        live_end = kv_len
    n_live = gl.cdiv(live_end, BLOCK_N)
    n_pages = gl.cdiv(kv_len, PAGE)

    # Shared memory. Q and the staging ring are 16-bit [rows, D] like K, so they take K's swizzled layout.
    k_lay: gl.constexpr = ck_desc.layout
    q_ring = gl.allocate_shared_memory(ck_desc.dtype, [CONSUMERS, ROWS_PER_CONSUMER, HEAD_DIM], k_lay)
    k_ring = gl.allocate_shared_memory(ck_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], k_lay)
    cv_ring = gl.allocate_shared_memory(cv_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], cv_desc.layout)
    if cv_desc.dtype == lv_desc.dtype:
        lv_ring = cv_ring
    else:
        lv_ring = gl.allocate_shared_memory(lv_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], lv_desc.layout)
    if LV_FP8:
        st_ring = gl.allocate_shared_memory(gl.float16, [STAGES, BLOCK_N, HEAD_DIM], k_lay)
    else:
        st_ring = lv_ring._reinterpret(gl.float16, [STAGES, BLOCK_N, HEAD_DIM], k_lay)
    # K and V stages are filled and released apart: a K stage is free once its QK^T is done, a tile before its V.
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    conv = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=CONSUMERS)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(v_empty.index(s), count=CONSUMERS)
    for c in gl.static_range(2):
        mbarrier.init(conv.index(c), count=CONSUMERS)

    # Bytes a K or V stage's "ready" barrier expects: one tile, cartridge box or BLOCK_N // PAGE pages.
    K_BYTES: gl.constexpr = BLOCK_N * HEAD_DIM * ck_desc.dtype.primitive_bitwidth // 8
    CV_BYTES: gl.constexpr = BLOCK_N * HEAD_DIM * cv_desc.dtype.primitive_bitwidth // 8
    LK_BYTES: gl.constexpr = BLOCK_N * HEAD_DIM * lk_desc.dtype.primitive_bitwidth // 8
    LV_BYTES: gl.constexpr = BLOCK_N * HEAD_DIM * lv_desc.dtype.primitive_bitwidth // 8
    rings = (k_ring, cv_ring, lv_ring, st_ring)
    bars = (k_ready, k_empty, v_ready, v_empty, conv)
    io = (q_ptr, o_ptr, cv_scale_ptr, lv_scale_ptr)
    tile = (rows0, q_start, q_len, kv_len, cart_len, n_live, kvh, qk_scale)
    strides = (stride_qt, stride_qh, stride_ot, stride_oh)
    walk = (page0, n_pages, cart_len, n_live, kvh, page_rows)
    # Constexprs are written out in each partition's arguments: through a tuple variable they would become values.
    if CONSUMERS == 2:
        gl.warp_specialize(
            [
                (_consumer, (0, io, rings, bars, q_ring, tile, strides,
                             GROUP, HEAD_DIM, BLOCK_N, STAGES, CONSUMERS, CAUSAL, CV_FP8, LV_FP8)),
                (_consumer, (1, io, rings, bars, q_ring, tile, strides,
                             GROUP, HEAD_DIM, BLOCK_N, STAGES, CONSUMERS, CAUSAL, CV_FP8, LV_FP8)),
                (_producer, ((ck_desc, cv_desc, lk_desc, lv_desc), (k_ring, cv_ring, lv_ring),
                             (k_ready, k_empty, v_ready, v_empty), kv_indices_ptr, walk,
                             BLOCK_N, HEAD_DIM, PAGE, STAGES, K_BYTES, CV_BYTES, LK_BYTES, LV_BYTES)),
            ],
            [4, PRODUCER_WARPS],
            [CONSUMER_REGISTERS, PRODUCER_REGISTERS],
        )  # fmt: skip
    else:
        gl.warp_specialize(
            [
                (_consumer, (0, io, rings, bars, q_ring, tile, strides,
                             GROUP, HEAD_DIM, BLOCK_N, STAGES, CONSUMERS, CAUSAL, CV_FP8, LV_FP8)),
                (_producer, ((ck_desc, cv_desc, lk_desc, lv_desc), (k_ring, cv_ring, lv_ring),
                             (k_ready, k_empty, v_ready, v_empty), kv_indices_ptr, walk,
                             BLOCK_N, HEAD_DIM, PAGE, STAGES, K_BYTES, CV_BYTES, LK_BYTES, LV_BYTES)),
            ],
            [PRODUCER_WARPS],
            [PRODUCER_REGISTERS],
        )  # fmt: skip
