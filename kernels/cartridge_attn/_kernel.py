"""The fused cartridge attention kernel (Triton), specialized for SM90.

One program owns one (query tile, KV head) pair and keeps one online-softmax state per (request, query
head) row from the first cartridge position to the last live token: the cartridge (dense, indexed
directly) and the paged live suffix (gathered through the page table) are two loops over the same
accumulator. There is no second output, no LSE and no merge.

Rows of a tile pack GQA query heads so that the matrix units see at least 16 rows:

* prefill: row ``r`` of a request is (query token ``r // G``, query head ``r % G`` of the KV head);
* decode: row ``r`` is (request ``r // G`` of the program's ``REQS`` requests, head ``r % G``). The
  cartridge tile is then loaded once and used by every request of the program; in the live loop each
  request contributes ``BLOCK_N // REQS`` columns and a block-diagonal mask keeps requests apart.

File order: capability tables, the inner step, the kernel (configurations: `heuristics`).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# The shapes the specialization covers and the launch heuristics live in a module without torch or triton, so
# that gate files can be expanded and linted against the dispatch without importing either.
from .heuristics import (  # noqa: F401  (re-exported: the API and the tests read them as _kernel.*)
    CASCADE_BLOCK_N,
    CASCADE_DEFAULT_ROWS,
    CASCADE_MIN_BATCH,
    CASCADE_RANGE_KEYS,
    CASCADE_ROWS,
    CASCADE_SPLITS_MAX,
    CASCADE_UNPACKED_MAX_LIVE,
    DECODE_PACK_MIN_BATCH,
    DECODE_SPLIT_KEYS,
    DECODE_SPLIT_MAX,
    DECODE_SPLIT_NARROW_KEYS,
    DECODE_WIDE_MAX_BATCH,
    DECODE_WIDE_MIN_LIVE,
    GPU_SMS,
    IMPLS,
    PREFILL_GRID_SMS,
    QUALIFIED_ARCHS,
    SM90_SHARED_BYTES,
    SUPPORTED_GROUPS,
    SUPPORTED_HEAD_DIMS,
    SUPPORTED_PAGE_SIZES,
    KernelConfig,
    cascade_by_default,
    cascade_rows,
    cascade_state_rows,
    decode_config,
    default_prefill_impl,
    gluon_shared_bytes,
    prefill_config,
)

# ---------------------------------------------------------------------------------------------------
# What the specialization covers. Anything else is rejected by the API, never sent to a fallback.
# ---------------------------------------------------------------------------------------------------
SUPPORTED_Q_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16)
FP8_DTYPE = torch.float8_e4m3fn

# The interpreter runs bf16/fp16 tl.dot incorrectly (seen with triton 3.9 + torch 2.13 on CPU), so in
# that mode every dot is done on fp32 operands. GPU builds never take that path.
INTERPRETED: bool = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# ---------------------------------------------------------------------------------------------------
# Inner step: one K/V tile folded into the running (max, sum, accumulator).
# ---------------------------------------------------------------------------------------------------
@triton.jit
def _attend(
    acc,
    m_i,
    l_i,
    q,
    k,
    v,
    visible,
    v_scale,
    qk_scale,
    MASKED: tl.constexpr,
    V_FP8: tl.constexpr,
    SCALE_P: tl.constexpr,
    DOT_F32: tl.constexpr,
    EMPTY_ROWS: tl.constexpr = False,
):
    if DOT_F32:
        qk = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
    else:
        qk = tl.dot(q, tl.trans(k))
    if MASKED:
        qk = tl.where(visible, qk, float("-inf"))
    # The running max is kept in scaled log2 units so that scaling and subtraction fuse into one FMA.
    # The cartridge comes first and every row sees position 0, so m_i is finite before any fully
    # masked live row reaches this point: no (-inf) - (-inf). Not so for a split of packed requests: a range
    # of live keys only, past a short request's end, masks every key of that request's rows (EMPTY_ROWS).
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    if EMPTY_ROWS:  # noqa: SIM108
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # an empty row's alpha and p come out 0, not NaN
    else:
        m_ref = m_new
    alpha = tl.math.exp2(m_i - m_ref)
    p = tl.math.exp2(qk * qk_scale - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if SCALE_P:
        p = p * v_scale
    if V_FP8:
        # E4M3 -> FP16 is one hardware conversion per pair (cvt.rn.f16x2.e4m3x2) and exact; going to
        # BF16 would add a per-element FP16 -> BF16 step. P is in [0, 1], where FP16 is the finer type.
        if DOT_F32:  # noqa: SIM108
            v = v.to(tl.float32)
        else:
            v = v.to(tl.float16)
    elif DOT_F32:
        v = v.to(tl.float32)
    if DOT_F32:  # noqa: SIM108
        acc = tl.dot(p, v, acc, input_precision="ieee")
    else:
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def _fold_states(
    acc, m_i, l_i, o_ptr, ml_ptr, rows, ok, state_rows, offs_d, STATES: tl.constexpr, HEAD_DIM: tl.constexpr
):
    """The running state (``acc``, ``m_i``, ``l_i``) of ``rows`` merged exactly with STATES more online-softmax
    states (state ``s`` of row ``r``: accumulator at ``o_ptr[(s * state_rows + r) * HEAD_DIM:]``, max and sum at
    ``ml_ptr[2 * s * state_rows + r]`` and ``[... + state_rows + r]``, the max in scaled log2 units). Rows not
    ``ok`` keep the running state; an empty state (max -inf, sum 0) weighs nothing."""
    m = m_i
    for s in tl.static_range(STATES):
        m = tl.maximum(m, tl.load(ml_ptr + 2 * s * state_rows + rows, mask=ok, other=float("-inf")))
    m_ref = tl.where(m == float("-inf"), 0.0, m)
    w_run = tl.math.exp2(m_i - m_ref)  # 0 for an empty running state
    l_sum = l_i * w_run
    acc = acc * w_run[:, None]
    for s in tl.static_range(STATES):
        m_s = tl.load(ml_ptr + 2 * s * state_rows + rows, mask=ok, other=float("-inf"))
        w = tl.where(m_s == float("-inf"), 0.0, tl.math.exp2(m_s - m_ref))  # an empty state weighs 0
        l_sum += w * tl.load(ml_ptr + (2 * s + 1) * state_rows + rows, mask=ok, other=0.0)
        part = o_ptr + (s * state_rows + rows).to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :]
        acc += w[:, None] * tl.load(part, mask=ok[:, None], other=0.0)
    return acc, m, l_sum


# ---------------------------------------------------------------------------------------------------
# The kernel.
# ---------------------------------------------------------------------------------------------------
# num_reqs is never specialized: Triton would otherwise build a separate binary for a batch of exactly 1 (and one
# for a multiple of 16), so the first lone-request prefill in a serving engine whose warm-up never made one paid a
# compile, and prefill does not even read it. Only decode's bounds checks do, where a constant 1 saves nothing.
@triton.jit(do_not_specialize=["num_reqs"])
def cartridge_attn_kernel(
    q_ptr,
    o_ptr,
    ck_ptr,
    cv_ptr,
    ck_desc,
    cv_desc,
    cv_scale_ptr,
    lk_ptr,
    lv_ptr,
    lv_scale_ptr,
    qo_indptr_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    kv_len_ptr,
    tile_req_ptr,
    tile_row_ptr,
    split_o_ptr,
    split_ml_ptr,
    split_count_ptr,
    cart_o_ptr,
    cart_ml_ptr,
    num_reqs,
    cart_len,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_ckt,
    stride_ckh,
    stride_cvt,
    stride_cvh,
    stride_lkp,
    stride_lkt,
    stride_lkh,
    stride_lvp,
    stride_lvt,
    stride_lvh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    REQS: tl.constexpr,
    DECODE: tl.constexpr,
    CAUSAL: tl.constexpr,
    CV_FP8: tl.constexpr,
    LV_FP8: tl.constexpr,
    DOT_F32: tl.constexpr,
    SPLITS: tl.constexpr,
    WARP_SPEC: tl.constexpr,
    CART_TMA: tl.constexpr,
    CART_STATES: tl.constexpr = 0,
    CART_PDL: tl.constexpr = False,
):
    pid = tl.program_id(0)
    kvh = tl.program_id(1)
    if SPLITS > 1:
        # Flash-decoding: SPLITS consecutive programs share one request (or REQS packed ones) and KV head.
        split = pid % SPLITS
        pid = pid // SPLITS
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    BN_R: tl.constexpr = BLOCK_N // REQS  # live columns per request per tile
    # A range of live keys only, past a short packed request's end, masks every key of that request's rows; a
    # cascade's live walk starts with no cartridge state, so a row can meet a fully masked tile first.
    EMPTY_ROWS: tl.constexpr = (SPLITS > 1 and REQS > 1) or CART_STATES > 0

    if DECODE:
        row_req_local = offs_m // GROUP
        row_req = pid * REQS + row_req_local
        head = offs_m % GROUP
        row_ok = (row_req_local < REQS) & (row_req < num_reqs)
        q_row = row_req  # one query per request
        row_len = tl.load(kv_len_ptr + row_req, mask=row_ok, other=0)
        limit = row_len - 1  # the single query is the last token: it sees every live token
        col_req_local = offs_n // BN_R
        col_req = pid * REQS + col_req_local
        col_req_ok = col_req < num_reqs
        col_len = tl.load(kv_len_ptr + col_req, mask=col_req_ok, other=0)
        col_page0 = tl.load(kv_indptr_ptr + col_req, mask=col_req_ok, other=0)
        live_end = tl.max(row_len, 0)
        n_live_full = 0
    else:
        req = tl.load(tile_req_ptr + pid)
        row0 = tl.load(tile_row_ptr + pid)
        q_start = tl.load(qo_indptr_ptr + req)
        q_len = tl.load(qo_indptr_ptr + req + 1) - q_start
        gr = row0 + offs_m
        tok = gr // GROUP
        head = gr % GROUP
        row_ok = tok < q_len
        q_row = q_start + tok
        kv_len = tl.load(kv_len_ptr + req)
        col_len = kv_len
        col_page0 = tl.load(kv_indptr_ptr + req)
        tok_lo = row0 // GROUP
        tok_hi = tl.minimum((row0 + BLOCK_M - 1) // GROUP, q_len - 1)
        if CAUSAL:
            # Bottom-right alignment: query t of n sees live tokens 0 .. kv_len - n + t.
            limit = kv_len - q_len + tok
            live_end = kv_len - q_len + tok_hi + 1
            live_all = kv_len - q_len + tok_lo + 1  # keys every row of the tile sees
        else:
            limit = kv_len - 1 + tok * 0
            live_end = kv_len
            live_all = kv_len
        n_live_full = live_all // BLOCK_N

    heads = kvh * GROUP + head
    q = tl.load(
        q_ptr + q_row[:, None].to(tl.int64) * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    cv_scale = tl.load(cv_scale_ptr + kvh)
    lv_scale = tl.load(lv_scale_ptr + kvh)

    # ---- cartridge: dense rows [0, cart_len), no page table ------------------------------------
    n_cart = cart_len
    if CART_STATES > 0:
        # Decode cascade: `cartridge_cascade_kernel` attends every request's rows over the cartridge, many rows per
        # tile, in the launch before; this program walks live keys only and merges those states at its end.
        n_cart = 0
    ck_base = ck_ptr + kvh * stride_ckh
    cv_base = cv_ptr + kvh * stride_cvh
    if SPLITS > 1:
        # This program's keys: a run [t_lo, t_hi) of whole tiles, the cartridge's (the last one partial) followed
        # by the live suffix's. Counted in tiles, not keys: a range of keys would start a split's live walk inside
        # a tile wherever the cartridge is no multiple of BLOCK_N long, and both neighbours would read that tile
        # (12.5 % more live bytes at 16 x 1024 with a 632-position cartridge, two splits).
        cart_tiles = tl.cdiv(n_cart, BLOCK_N)
        tiles = cart_tiles + tl.cdiv(live_end, BN_R)
        per_split = tl.cdiv(tiles, SPLITS)
        t_lo = split * per_split
        t_hi = tl.maximum(tl.minimum(t_lo + per_split, tiles), t_lo)  # a short request leaves its last splits empty
        c_hi = tl.minimum(tl.minimum(t_hi, cart_tiles) * BLOCK_N, n_cart)
        c_lo = tl.minimum(
            tl.minimum(t_lo, cart_tiles) * BLOCK_N, c_hi
        )  # a live-only split: an empty loop, never reversed
        l_lo = tl.maximum(t_lo - cart_tiles, 0) * BN_R
        l_hi = tl.minimum(tl.maximum(t_hi - cart_tiles, 0) * BN_R, live_end)
    else:
        c_lo = 0
        c_hi = n_cart
    if DECODE:
        # Few, short loops: one pipelined loop with the ragged end masked costs less than a separate,
        # unpipelined tail tile whose loads would wait a full memory latency.
        for start in tl.range(c_lo, c_hi, BLOCK_N):
            pos = start + offs_n
            ok = pos < c_hi
            k = tl.load(ck_base + pos[:, None] * stride_ckt + offs_d[None, :], mask=ok[:, None], other=0.0)
            v = tl.load(cv_base + pos[:, None] * stride_cvt + offs_d[None, :], mask=ok[:, None], other=0.0)
            acc, m_i, l_i = _attend(
                acc, m_i, l_i, q, k, v, ok[None, :], cv_scale, qk_scale, True, CV_FP8, False, DOT_F32
            )
    else:
        n_cart_full = (n_cart // BLOCK_N) * BLOCK_N
        if CART_TMA:
            # The descriptors view the cartridge as (T_c, H_kv * D): a tile is a box of BLOCK_N rows at column
            # kvh * D, copied into shared memory by the TMA unit with no per-thread addresses.
            for start in tl.range(0, n_cart_full, BLOCK_N, warp_specialize=WARP_SPEC):
                k = ck_desc.load([start, kvh * HEAD_DIM])
                v = cv_desc.load([start, kvh * HEAD_DIM])
                acc, m_i, l_i = _attend(acc, m_i, l_i, q, k, v, 0, cv_scale, qk_scale, False, CV_FP8, False, DOT_F32)
        else:
            for start in tl.range(0, n_cart_full, BLOCK_N, warp_specialize=WARP_SPEC):
                pos = start + offs_n
                k = tl.load(ck_base + pos[:, None] * stride_ckt + offs_d[None, :])
                v = tl.load(cv_base + pos[:, None] * stride_cvt + offs_d[None, :])  # FP8 load before the QK dot
                acc, m_i, l_i = _attend(acc, m_i, l_i, q, k, v, 0, cv_scale, qk_scale, False, CV_FP8, False, DOT_F32)
        if n_cart_full < n_cart:
            pos = n_cart_full + offs_n
            ok = pos < n_cart
            k = tl.load(ck_base + pos[:, None] * stride_ckt + offs_d[None, :], mask=ok[:, None], other=0.0)
            v = tl.load(cv_base + pos[:, None] * stride_cvt + offs_d[None, :], mask=ok[:, None], other=0.0)
            acc, m_i, l_i = _attend(
                acc, m_i, l_i, q, k, v, ok[None, :], cv_scale, qk_scale, True, CV_FP8, False, DOT_F32
            )
    # The cartridge's per-head V scale is constant over the whole cartridge: applied once to the
    # accumulator here (a [M, D] multiply) instead of to every P tile (a cascade's states carry it already).
    if CV_FP8 and CART_STATES == 0:
        acc = acc * cv_scale

    # ---- live suffix through the page table ----------------------------------------------------
    # Live FP8 values: their scale goes on P (live tiles interleave with nothing else to fold it into).
    LV_SCALE_P: tl.constexpr = LV_FP8
    lk_base = lk_ptr + kvh * stride_lkh
    lv_base = lv_ptr + kvh * stride_lvh
    # Tiles every row sees in full (prefill only): no mask, no bounds checks.
    for it in tl.range(0, n_live_full, warp_specialize=WARP_SPEC):
        j = it * BLOCK_N + offs_n
        page = tl.load(kv_indices_ptr + col_page0 + j // PAGE).to(tl.int64)
        slot = j % PAGE
        k = tl.load(lk_base + page[:, None] * stride_lkp + slot[:, None] * stride_lkt + offs_d[None, :])
        v = tl.load(lv_base + page[:, None] * stride_lvp + slot[:, None] * stride_lvt + offs_d[None, :])
        acc, m_i, l_i = _attend(acc, m_i, l_i, q, k, v, 0, lv_scale, qk_scale, False, LV_FP8, LV_SCALE_P, DOT_F32)
    # Tiles on the causal diagonal, at the end of a sequence, or (decode) shared by several requests.
    n_iter = tl.cdiv(live_end, BN_R)
    if SPLITS > 1:
        # The split's own whole tiles [l_lo, l_hi), which need no mask of its range (and none fully masked: it
        # would meet an empty running max, -inf - -inf).
        n_live_full = l_lo // BN_R
        n_iter = tl.where(l_hi > l_lo, tl.cdiv(l_hi, BN_R), n_live_full)
    for it in tl.range(n_live_full, n_iter):
        j = it * BN_R + offs_n % BN_R
        col_ok = j < col_len
        page = tl.load(kv_indices_ptr + col_page0 + j // PAGE, mask=col_ok, other=0).to(tl.int64)
        slot = j % PAGE
        k = tl.load(
            lk_base + page[:, None] * stride_lkp + slot[:, None] * stride_lkt + offs_d[None, :],
            mask=col_ok[:, None],
            other=0.0,
        )
        v = tl.load(
            lv_base + page[:, None] * stride_lvp + slot[:, None] * stride_lvt + offs_d[None, :],
            mask=col_ok[:, None],
            other=0.0,
        )
        visible = j[None, :] <= limit[:, None]
        if DECODE:
            visible = visible & (col_req_local[None, :] == row_req_local[:, None])
        acc, m_i, l_i = _attend(
            acc, m_i, l_i, q, k, v, visible, lv_scale, qk_scale, True, LV_FP8, LV_SCALE_P, DOT_F32, EMPTY_ROWS
        )

    if CART_STATES > 0:
        # Launched as the cascade's programmatic dependent, this program may have run beside it until here: wait
        # for its states. Every program waits, so that this launch's end implies the cascade's.
        if CART_PDL:
            tl.extra.cuda.gdc_wait()
        st_rows = row_req * (tl.num_programs(1) * GROUP) + heads
        st_ok = row_ok
        if SPLITS > 1:
            st_ok = st_ok & (offs_m * 0 + split == 0)  # a vector mask: the interpreter takes no scalar in it
        acc, m_i, l_i = _fold_states(
            acc, m_i, l_i, cart_o_ptr, cart_ml_ptr, st_rows, st_ok, num_reqs * tl.num_programs(1) * GROUP, offs_d,
            CART_STATES, HEAD_DIM,
        )  # fmt: skip

    o_ptrs = o_ptr + q_row[:, None].to(tl.int64) * stride_ot + heads[:, None] * stride_oh + offs_d[None, :]
    if SPLITS > 1:
        # Publish this split's state; the program that arrives last combines all of them exactly (the max in
        # scaled log2 units, as in _attend) and re-arms the counter for the next launch (graph replays too). Only
        # the query rows' accumulators travel: a tile's padding rows (12 of 16 for one request of a GQA group of 4)
        # would make the workspace bytes the last program reads on its own four times as many.
        slot = (pid * tl.num_programs(1) + kvh) * SPLITS
        base_o = split_o_ptr + (slot + split).to(tl.int64) * (BLOCK_M * HEAD_DIM)
        tl.store(base_o + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=row_ok[:, None])
        base_ml = split_ml_ptr + (slot + split).to(tl.int64) * (2 * BLOCK_M)
        tl.store(base_ml + offs_m, m_i)
        tl.store(base_ml + BLOCK_M + offs_m, l_i)
        arrived = tl.atomic_add(split_count_ptr + pid * tl.num_programs(1) + kvh, 1, sem="acq_rel")
        if arrived == SPLITS - 1:
            ml = split_ml_ptr + slot.to(tl.int64) * (2 * BLOCK_M)
            m_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
            for s in tl.static_range(SPLITS):
                m_max = tl.maximum(m_max, tl.load(ml + s * 2 * BLOCK_M + offs_m, cache_modifier=".cg"))
            total_acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
            total_l = tl.zeros([BLOCK_M], tl.float32)
            for s in tl.static_range(SPLITS):
                # An empty split (a short request) left m = -inf, l = 0, acc = 0: its weight is 0.
                m_s = tl.load(ml + s * 2 * BLOCK_M + offs_m, cache_modifier=".cg")
                w = tl.where(m_s == float("-inf"), 0.0, tl.math.exp2(m_s - m_max))
                part = split_o_ptr + (slot + s).to(tl.int64) * (BLOCK_M * HEAD_DIM)
                a = tl.load(
                    part + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=row_ok[:, None],
                    other=0.0,
                    cache_modifier=".cg",
                )
                total_acc += w[:, None] * a
                total_l += w * tl.load(ml + s * 2 * BLOCK_M + BLOCK_M + offs_m, cache_modifier=".cg")
            out = total_acc / total_l[:, None]
            tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
            tl.atomic_xchg(split_count_ptr + pid * tl.num_programs(1) + kvh, 0, sem="relaxed")
    else:
        out = acc / l_i[:, None]
        tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
