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
* **Turns between the two consumers** (FA3's ping-pong): each issues its wgmmas only after the other has issued
  its own, so that one's softmax runs while the other's wgmmas do. Timed twice, it is a tie: -3 % at 64 x 512 alone,
  nothing measurable on top of the persistent grid (results/2026-12-07-gluon-persistent-pingpong-h200), so the
  persistent grid's consumers do not take them.

**A persistent grid** (PERSISTENT; `KernelConfig.persistent`, the dispatch's for its 128-row tiles): as many
programs as the GPU holds at once (`gluon_host.programs_per_sm`), each walking work items, a plan tile for one KV
head, in strides of the grid. Every partition walks the same items, and the rings' stages and barrier phases run on
from one item to the next, so the producer loads an item's first tiles while the consumers finish the last one's.
One program per item pays its prologue and epilogue with the tensor cores idle, in every one of many waves. Without
PERSISTENT the walk over items is one trip, which the compiler removes: the grid's (tile, KV head) is the item.

**The output leaves through shared memory**: the wgmma accumulator's layout gives a thread pairs of adjacent
columns, which it would store 4 bytes at a time; each warpgroup writes its tile into its Q buffer (free after the
last QK^T) and stores from there in 16-byte vectors (results/2026-12-06-gluon-epilogue-h100).

**An FP8 cartridge arrives as its exact FP16 expansion** (`gluon_host.CartridgeV16`, made once per layer; the
per-head scale is applied to the accumulator, so P is FP16 there, as in the Triton kernel): no cartridge tile is
converted in the kernel. Converting them in every program had cost about a fifth of the kernel against a 16-bit
cartridge (results/2026-12-06-gluon-overlap-h100; results/2026-12-06-gluon-expansion-h100 measures the change).

**A stager** (two warps in the producer's warpgroup, which would otherwise sit idle) readies every V stage for
the PV wgmma, so the consumers never wait for each other. A 16-bit V stage is passed on as loaded. An FP8 live
stage is converted to FP16 in shared memory first (exact, one instruction per pair; P is then FP16). The live
suffix's last tile is ragged: its slots past the request's ``kv_len`` hold whatever the cache holds there (NaN
included), and P = 0 times NaN is NaN, so those V rows are zeroed in shared memory the same way (a TMA box cannot
be masked). Each V stage thus has a "staged" barrier besides its "ready" one. The first version had the two
consumers convert half a tile each and meet at a barrier every tile.

Buffers: K ``[STAGES, BLOCK_N, D]``; one 16-bit V ring ``[STAGES, BLOCK_N, D]`` whose stage holds whatever tile
the stage does (a cartridge tile, a 16-bit live tile, or the FP16 staging of an FP8 live tile); an FP8 live V
ring when live values are FP8.
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
STAGER_WARPS = gl.constexpr(2)  # beside the producer warp, in the warpgroup it would otherwise leave idle
# Registers of that warpgroup (producer and stager alike): what the consumers leave of the CTA's budget. Two
# consumers on 224 registers leave 56; one consumer, the launch's default partition, keeps 216 when they take 40.
# No partition spills in the stager's loop at these counts (offline builds, tests/gluon).
AUX_REGISTERS_TWO_CONSUMERS = gl.constexpr(56)
AUX_REGISTERS_ONE_CONSUMER = gl.constexpr(40)


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
def _rows_layout(head_dim, elem_bits, warps=4, split=1):
    # 16-byte vectors along D, the rest of the warp along rows; with split > 1 a warp's threads cover 1 / split of D
    # and each thread holds split vectors of a row.
    per_thread = 128 // elem_bits
    across = head_dim // per_thread // split
    return gl.BlockedLayout([1, per_thread], [32 // across, across], [warps, 1], [1, 0])


# ---------------------------------------------------------------------------------------------------
# Work items: every partition walks the same ones.
# ---------------------------------------------------------------------------------------------------
@gluon.jit
def _program():
    # %ctaid.x read where it is used: an asm with side effects is neither shared nor hoisted. Read once for every
    # partition, it would be live across their register moves, and ptxas spills such values.
    return gl.inline_asm_elementwise("mov.u32 $0, %ctaid.x;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _items(plan, PERSISTENT: gl.constexpr):
    """How many work items this program walks: on a persistent grid, items pid, pid + P, ... below n_tiles x n_kvh,
    where P is the number of programs; else its own (a one-trip loop, which the compiler removes)."""
    _, _, _, _, _, n_tiles, n_kvh, n_programs = plan
    if PERSISTENT:
        return gl.cdiv(n_tiles * n_kvh - _program(), n_programs)
    else:
        return 1


@gluon.jit
def _work_item(
    plan,
    k,
    GROUP: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    CAUSAL: gl.constexpr,
    PERSISTENT: gl.constexpr,
):
    """This program's k-th work item. On a persistent grid, w = pid + k P: the plan's tile ``w % n_tiles`` for KV
    head ``w // n_tiles``, so that the items in flight at once share a head, and with it their requests' live K and
    V in L2 (interleaving the heads read 2.5 times the DRAM bytes, results/2026-12-07-gluon-persistent-h100). Else
    the grid's (tile, KV head). Returns (KV head, first row, the request's first query token, its query length, its
    live length, its first page's index in kv_indices, the live tiles the tile's last row sees)."""
    tile_req_ptr, tile_row_ptr, qo_indptr_ptr, kv_indptr_ptr, kv_len_ptr, n_tiles, _, n_programs = plan
    if PERSISTENT:
        w = _program() + k * n_programs
        tile = w % n_tiles
        kvh = w // n_tiles
    else:
        tile = gl.program_id(0)
        kvh = gl.program_id(1)
    req = gl.load(tile_req_ptr + tile)
    rows0 = gl.load(tile_row_ptr + tile)
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
    # Never negative, even from a block table that breaks the plan's promise (kv_len >= q_len): every partition
    # advances its ring position by this count, so a negative one would send their barrier phases backwards.
    return kvh, rows0, q_start, q_len, kv_len, page0, gl.maximum(n_live, 0)


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
    plan,
    walk,
    GROUP: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    PAGE: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    PERSISTENT: gl.constexpr,
    K_BYTES: gl.constexpr,
    CV_BYTES: gl.constexpr,
    LK_BYTES: gl.constexpr,
    LV_BYTES: gl.constexpr,
):
    cart_len, page_rows, lk_head_cols, lv_head_cols = walk
    n_cart = gl.cdiv(cart_len, BLOCK_N)
    it = 0  # tiles loaded so far: the rings' stages and barrier phases run on across work items
    for k in range(_items(plan, PERSISTENT)):
        kvh, _, _, _, kv_len, page0, n_live = _work_item(plan, k, GROUP, BLOCK_M, BLOCK_N, CAUSAL, PERSISTENT)
        _produce(descs, rings, bars, kv_indices_ptr, it, (page0, gl.cdiv(kv_len, PAGE), n_cart, n_live, kvh),
                 (page_rows, lk_head_cols, lv_head_cols), BLOCK_N, HEAD_DIM, PAGE, STAGES, K_BYTES, CV_BYTES,
                 LK_BYTES, LV_BYTES)  # fmt: skip
        it += n_cart + n_live


@gluon.jit
def _produce(
    descs,
    rings,
    bars,
    kv_indices_ptr,
    it,
    tile,
    view,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    PAGE: gl.constexpr,
    STAGES: gl.constexpr,
    K_BYTES: gl.constexpr,
    CV_BYTES: gl.constexpr,
    LK_BYTES: gl.constexpr,
    LV_BYTES: gl.constexpr,
):
    """Every K and V tile of one work item, in the order the consumers walk them, from ring position ``it``."""
    ck_desc, cv_desc, lk_desc, lv_desc = descs
    k_ring, cv_ring, lv_ring = rings
    k_ready, k_empty, v_ready, v_empty = bars
    page0, n_pages, n_cart, n_live, kvh = tile
    page_rows, lk_head_cols, lv_head_cols = view
    col = kvh * HEAD_DIM
    # A live view's heads may sit further apart than HEAD_DIM columns (vLLM's pages hold each head's K and V in one
    # row), and K and V apart by different counts when their dtypes differ.
    lk_col = kvh * lk_head_cols
    lv_col = kvh * lv_head_cols
    # K before V within a tile: the consumers release K a tile earlier than V, so a K stage is never queued
    # behind a V stage that frees later.
    for c in range(n_cart):
        i = it + c
        s = i % STAGES
        # A partial last box is zero-filled past T_c by the TMA unit and still counts its full bytes.
        bar = _acquire(k_empty, k_ready, i, K_BYTES, STAGES)
        tma.async_copy_global_to_shared(ck_desc, [c * BLOCK_N, col], bar, k_ring.index(s))
        bar = _acquire(v_empty, v_ready, i, CV_BYTES, STAGES)
        tma.async_copy_global_to_shared(cv_desc, [c * BLOCK_N, col], bar, cv_ring.index(s))
    PAGES: gl.constexpr = BLOCK_N // PAGE
    lanes = gl.arange(0, PAGES, gl.BlockedLayout([1], [32], [1], [0]))
    for t in range(n_live):
        # The tile's page numbers are read before waiting for a free stage, so that their global-memory latency
        # overlaps the wait instead of preceding the copies. Pages past the request's last one repeat that page: the
        # expected byte count is a constant, so every slice is filled (the consumers mask those columns and zero
        # their V rows).
        pages = gl.load(kv_indices_ptr + page0 + gl.minimum(t * PAGES + lanes, n_pages - 1))
        i = it + n_cart + t
        s = i % STAGES
        bar = _acquire(k_empty, k_ready, i, LK_BYTES, STAGES)
        k_dst = k_ring.index(s)
        for p in gl.static_range(PAGES):
            tma.async_copy_global_to_shared(lk_desc, [_page_row(pages, lanes, p, page_rows), lk_col], bar,
                                            k_dst.slice(p * PAGE, PAGE))  # fmt: skip
        bar = _acquire(v_empty, v_ready, i, LV_BYTES, STAGES)
        v_dst = lv_ring.index(s)
        for p in gl.static_range(PAGES):
            tma.async_copy_global_to_shared(lv_desc, [_page_row(pages, lanes, p, page_rows), lv_col], bar,
                                            v_dst.slice(p * PAGE, PAGE))  # fmt: skip


# ---------------------------------------------------------------------------------------------------
# Stager: STAGER_WARPS warps ready every V stage for the PV wgmma, so the consumers never meet.
# ---------------------------------------------------------------------------------------------------
@gluon.jit
def _stage_tile(
    src,
    dst,
    first_pos,
    valid_end,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGER_WARPS: gl.constexpr,
):
    """A V stage into ``dst``'s dtype with rows at positions >= valid_end zeroed, a chunk of rows at a time (FP8 is
    loaded 8 bytes to a thread, in the 16-bit layout, so it is stored as converted with no layout change)."""
    lay: gl.constexpr = _rows_layout(HEAD_DIM, 16, STAGER_WARPS)
    ROWS: gl.constexpr = 16 * STAGER_WARPS // (HEAD_DIM // 64)
    for r in gl.static_range(0, BLOCK_N, ROWS):
        x = src.slice(r, ROWS).load(lay)
        pos = first_pos + r + gl.arange(0, ROWS, gl.SliceLayout(1, lay))
        dst.slice(r, ROWS).store(gl.where((pos < valid_end)[:, None], x.to(dst.dtype), 0.0))


@gluon.jit
def _stager(
    rings,
    bars,
    plan,
    cart_len,
    LV_FP8: gl.constexpr,
    GROUP: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    PERSISTENT: gl.constexpr,
    STAGER_WARPS: gl.constexpr,
):
    """Relays tile i's V from "ready" (its copies landed) to "staged" (the PV wgmma may read it), in tile order:
    FP8 live values are converted to FP16 into the staging ring (rows past the request's end zeroed); a 16-bit live
    tile that runs past the request's end has those rows zeroed in place (the cache's free slots may hold NaN, and
    P = 0 times NaN is NaN); cartridge tiles (16-bit, their box zero-filled past T_c) and other live tiles pass as
    loaded. Writing the staging ring is safe: tile i's "ready" completed only after every consumer released the
    stage's previous tile, after its PV wgmma, and the staging ring's stage is idle while it holds a live tile."""
    lv_ring, st_ring = rings
    v_ready, staged = bars
    n_cart = gl.cdiv(cart_len, BLOCK_N)
    it = 0
    for k in range(_items(plan, PERSISTENT)):
        _, _, _, _, kv_len, _, n_live = _work_item(plan, k, GROUP, BLOCK_M, BLOCK_N, CAUSAL, PERSISTENT)
        for c in range(n_cart):
            i = it + c
            s = i % STAGES
            mbarrier.wait(v_ready.index(s), (i // STAGES) & 1)
            _hand_over(staged.index(s))
        for t in range(n_live):
            i = it + n_cart + t
            s = i % STAGES
            mbarrier.wait(v_ready.index(s), (i // STAGES) & 1)
            if LV_FP8:
                _stage_tile(lv_ring.index(s), st_ring.index(s), t * BLOCK_N, kv_len, BLOCK_N, HEAD_DIM,
                            STAGER_WARPS)  # fmt: skip
            elif t * BLOCK_N + BLOCK_N > kv_len:
                v = lv_ring.index(s)
                _stage_tile(v, v, t * BLOCK_N, kv_len, BLOCK_N, HEAD_DIM, STAGER_WARPS)
            _hand_over(staged.index(s))
        it += n_cart + n_live


@gluon.jit
def _hand_over(bar):
    # Generic-proxy stores, read next by the wgmma's async proxy; every warp of the stager has stored its rows
    # before the one arrival.
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bar, count=1)


# ---------------------------------------------------------------------------------------------------
# Consumer: one warpgroup, 64 rows.
# ---------------------------------------------------------------------------------------------------
@gluon.jit
def _release(bar):
    # Every warp of the warpgroup has passed its wgmma wait before the one arrival that counts this consumer.
    gl.thread_barrier()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _my_turn(turns, j, PINGPONG: gl.constexpr):
    """Waits for this warpgroup's j-th turn: warpgroup 0's first is given at launch, its j-th comes once warpgroup
    1 has issued its wgmmas j - 1, and warpgroup 1's j-th once warpgroup 0 has issued its wgmmas j. The two
    alternate strictly, never a turn apart by more than one, so the parity of j names the phase."""
    if PINGPONG:
        mine, _ = turns
        mbarrier.wait(mine, j & 1)


@gluon.jit
def _pass_turn(turns, PINGPONG: gl.constexpr):
    if PINGPONG:
        _, other = turns
        # Every warp of the warpgroup has issued before the other warpgroup may.
        _release(other)


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
    acc,
    m_i,
    l_i,
    q_smem,
    k_ring,
    v_ring,
    st_ring,
    bars,
    turns,
    j,
    limit,
    v_scale,
    qk_scale,
    FROM_STAGING: gl.constexpr,
    SCALE_P: gl.constexpr,
    PINGPONG: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
):
    """Tiles i0 .. i0 + n - 1 of one source (n >= 1), at positions t * BLOCK_N; tiles from n_full on are masked.
    ``j`` counts this warpgroup's wgmma issues so far (n + 1 here); returns the count after them.

    Software-pipelined within the warpgroup: tile t's QK^T wgmma and tile t - 1's PV wgmma are issued together,
    and tile t's softmax runs while the PV wgmma does. K stages are released as soon as their QK^T is done, V
    stages once their PV is. The PV reads V from the staging ring (FP8 converted by the stager) when
    FROM_STAGING, else from the ring it was loaded into.

    With PINGPONG (two consumers) the warpgroups take turns to issue (`_my_turn`, `_pass_turn`), so one's
    softmax runs while the other's wgmmas have the tensor cores (FA3's ping-pong schedule).
    """
    k_ready, k_empty, staged, v_empty = bars
    s_layout: gl.constexpr = _score_layout(BLOCK_N)
    o_layout: gl.constexpr = _out_layout(HEAD_DIM)
    pv_ring = st_ring if FROM_STAGING else v_ring
    zeros = gl.zeros([ROWS_PER_CONSUMER, BLOCK_N], gl.float32, s_layout)

    # Tile 0: nothing to overlap with.
    s = i0 % STAGES
    mbarrier.wait(k_ready.index(s), (i0 // STAGES) & 1)
    _my_turn(turns, j, PINGPONG)
    scores = warpgroup_mma(q_smem, k_ring.index(s).permute((1, 0)), zeros, use_acc=False, is_async=True)
    _pass_turn(turns, PINGPONG)
    j += 1
    scores = warpgroup_mma_wait(num_outstanding=0, deps=(scores,))
    _release(k_empty.index(s))
    p, m_i, l_i, alpha = _softmax(scores, m_i, l_i, 0, limit, n_full == 0, v_scale, qk_scale, SCALE_P, BLOCK_N)
    p_op = _operand(p, pv_ring.dtype, o_layout)
    acc = _rescale(acc, alpha, o_layout)
    mbarrier.wait(staged.index(s), (i0 // STAGES) & 1)

    for t in range(1, n):
        i = i0 + t
        s = i % STAGES
        prev = (i - 1) % STAGES
        mbarrier.wait(k_ready.index(s), (i // STAGES) & 1)
        _my_turn(turns, j, PINGPONG)
        scores = warpgroup_mma(q_smem, k_ring.index(s).permute((1, 0)), zeros, use_acc=False, is_async=True)
        acc = warpgroup_mma(p_op, pv_ring.index(prev), acc, is_async=True)
        _pass_turn(turns, PINGPONG)
        j += 1
        # wgmma groups retire in order: one left outstanding is the PV, so the scores are complete.
        scores = warpgroup_mma_wait(num_outstanding=1, deps=(scores,))
        _release(k_empty.index(s))
        p, m_new, l_i, alpha = _softmax(scores, m_i, l_i, t * BLOCK_N, limit, t >= n_full, v_scale, qk_scale,
                                        SCALE_P, BLOCK_N)  # fmt: skip
        # Waiting for tile t's staged V before the PV wait, not after, keeps the softmax overlapping the PV: ptxas
        # hoists that wait to the top of the basic block holding the softmax, and an mbarrier wait loop is a block
        # boundary it does not cross. Its stage is not the one the PV in flight reads (s != prev).
        mbarrier.wait(staged.index(s), (i // STAGES) & 1)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        _release(v_empty.index(prev))
        p_op = _operand(p, pv_ring.dtype, o_layout)
        acc = _rescale(acc, alpha, o_layout)
        m_i = m_new

    last = (i0 + n - 1) % STAGES
    _my_turn(turns, j, PINGPONG)
    acc = warpgroup_mma(p_op, pv_ring.index(last), acc, is_async=True)
    _pass_turn(turns, PINGPONG)
    j += 1
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    _release(v_empty.index(last))
    return acc, m_i, l_i, j


@gluon.jit
def _consumer(
    wg: gl.constexpr,
    io,
    rings,
    bars,
    turn_ring,
    q_ring,
    plan,
    scalars,
    strides,
    GROUP: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    PERSISTENT: gl.constexpr,
    CV_SCALE: gl.constexpr,
    LV_FP8: gl.constexpr,
    PINGPONG: gl.constexpr,
):
    cart_len, qk_scale = scalars
    q_smem = q_ring.index(wg)
    n_cart = gl.cdiv(cart_len, BLOCK_N)
    turns = (turn_ring.index(wg), turn_ring.index(1 - wg))
    it = 0
    j = 0  # wgmma issues so far: the turns run on across work items
    for k in range(_items(plan, PERSISTENT)):
        kvh, rows0, q_start, q_len, kv_len, _, n_live = _work_item(plan, k, GROUP, BLOCK_M, BLOCK_N, CAUSAL, PERSISTENT)
        tile = (rows0, q_start, q_len, kv_len, cart_len, n_live, kvh, qk_scale)
        j = _consume(wg, io, rings, bars, turns, q_smem, tile, strides, it, j,
                     GROUP, HEAD_DIM, BLOCK_N, STAGES, CAUSAL, PERSISTENT, CV_SCALE, LV_FP8, PINGPONG)  # fmt: skip
        it += n_cart + n_live


@gluon.jit
def _consume(
    wg: gl.constexpr,
    io,
    rings,
    bars,
    turns,
    q_smem,
    tile,
    strides,
    it,
    j,
    GROUP: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    PERSISTENT: gl.constexpr,
    CV_SCALE: gl.constexpr,
    LV_FP8: gl.constexpr,
    PINGPONG: gl.constexpr,
):
    """One work item's 64 rows of this warpgroup, its tiles from ring position ``it``: Q in, both walks, out.
    ``j`` counts the warpgroup's wgmma issues so far; returns the count after this item's."""
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

    # ---- cartridge: full tiles, then the ragged one (its box is zero-filled past T_c) ----
    n_cart = gl.cdiv(cart_len, BLOCK_N)
    cart_limit = cart_len - 1 + tok_s * 0
    acc, m_i, l_i, j = _walk(
        it, n_cart, cart_len // BLOCK_N, acc, m_i, l_i, q_smem, k_ring, cv_ring, st_ring, bars, turns, j,
        cart_limit, 1.0, qk_scale, False, False, PINGPONG, BLOCK_N, HEAD_DIM, STAGES,
    )  # fmt: skip
    # An FP8 cartridge's per-head V scale is constant over the cartridge: applied once to the accumulator (its
    # values arrive as their exact FP16 expansion, unscaled).
    if CV_SCALE:
        acc = acc * gl.load(cv_scale_ptr + kvh)

    # ---- live suffix: tiles every row of this warpgroup sees in full, then masked ones ----
    lv_scale = gl.load(lv_scale_ptr + kvh)
    # Capped at kv_len so that a full tile is never the ragged one (a warpgroup of padding rows sees past q_len).
    n_live_full = gl.minimum(gl.minimum(gl.maximum(live_all, 0), kv_len) // BLOCK_N, n_live)
    # The plan guarantees a live token per request (kv_len >= q_len >= 1); a block table from an engine that broke
    # that promise must not leave a consumer waiting for a tile the producer never loads.
    if n_live > 0:
        acc, m_i, l_i, j = _walk(
            it + n_cart, n_live, n_live_full, acc, m_i, l_i, q_smem, k_ring, lv_ring, st_ring, bars, turns, j,
            limit, lv_scale, qk_scale, LV_FP8, LV_FP8, PINGPONG, BLOCK_N, HEAD_DIM, STAGES,
        )  # fmt: skip

    out = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    # Out through the Q buffer, free once the last QK^T is done (every wgmma is waited for): from the wgmma's
    # layout a thread would store 4-byte pairs; from shared memory it stores 16-byte vectors along D. The layout is
    # not the Q load's: with that one the compiler keeps the load's row indices alive through both walks (and spills
    # them where one consumer holds a 64 x 128 score tile) rather than compute them again.
    q_smem.store(out.to(q_smem.dtype))
    gl.thread_barrier()
    st_lay: gl.constexpr = _rows_layout(HEAD_DIM, 16, split=2)
    o = q_smem.load(st_lay)
    gr_o = row0 + gl.arange(0, M, gl.SliceLayout(1, st_lay))
    tok_o = gr_o // GROUP
    head_o = kvh * GROUP + gr_o % GROUP
    d_o = gl.arange(0, HEAD_DIM, gl.SliceLayout(0, st_lay))
    o_off = (q_start + tok_o)[:, None].to(gl.int64) * stride_ot + head_o[:, None] * stride_oh + d_o[None, :]
    gl.store(o_ptr + o_off, o.to(o_ptr.dtype.element_ty), mask=(tok_o < q_len)[:, None])
    if PERSISTENT:
        # The next work item's Q overwrites the buffer every warp of the warpgroup has just read.
        gl.thread_barrier()
    return j


# ---------------------------------------------------------------------------------------------------
# The kernel.
# ---------------------------------------------------------------------------------------------------
# The work counts change with every plan: specializing on them (1, multiples of 16) would only add variants.
@gluon.jit(do_not_specialize=["n_tiles", "n_kvh", "n_programs"])
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
    n_tiles,
    n_kvh,
    n_programs,
    cart_len,
    qk_scale,
    page_rows,
    lk_head_cols,
    lv_head_cols,
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
    PERSISTENT: gl.constexpr,
    CV_SCALE: gl.constexpr,
    CONSUMER_REGISTERS: gl.constexpr,
):
    CONSUMERS: gl.constexpr = BLOCK_M // ROWS_PER_CONSUMER
    # The turns only where each program walks one item: on a persistent grid they cost an arrive (with its
    # barrier) and a wait per tile, and were timed a tie there (results/2026-12-07-gluon-persistent-pingpong-h200).
    PINGPONG: gl.constexpr = CONSUMERS == 2 and not PERSISTENT
    LV_FP8: gl.constexpr = lv_desc.dtype.primitive_bitwidth == 8
    # The host hands an FP8 cartridge's values over as their exact FP16 expansion (`gluon_host.CartridgeV16`),
    # with CV_SCALE set: no cartridge tile is converted in the kernel.
    gl.static_assert(cv_desc.dtype.primitive_bitwidth == 16, "cartridge V must be 16-bit (FP8 is expanded)")

    # Shared memory. Q and every 16-bit V buffer are [rows, D] like K, so they take K's swizzled layout. One 16-bit
    # V ring serves a stage whatever tile it holds: a cartridge tile, a 16-bit live tile (another dtype is the same
    # bytes reinterpreted), or the FP16 staging of an FP8 live tile, whose FP8 copy lands in a ring of its own.
    k_lay: gl.constexpr = ck_desc.layout
    q_ring = gl.allocate_shared_memory(ck_desc.dtype, [CONSUMERS, ROWS_PER_CONSUMER, HEAD_DIM], k_lay)
    k_ring = gl.allocate_shared_memory(ck_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], k_lay)
    cv_ring = gl.allocate_shared_memory(cv_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], cv_desc.layout)
    if LV_FP8:
        lv_ring = gl.allocate_shared_memory(lv_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], lv_desc.layout)
        st_ring = cv_ring._reinterpret(gl.float16, [STAGES, BLOCK_N, HEAD_DIM], k_lay)
    else:
        lv_ring = cv_ring._reinterpret(lv_desc.dtype, [STAGES, BLOCK_N, HEAD_DIM], lv_desc.layout)
        st_ring = lv_ring
    # K and V stages are filled and released apart: a K stage is free once its QK^T is done, a tile before its V.
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    # V stages pass through the stager: "ready" (copies landed) to "staged" (readable by the PV wgmma).
    staged = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=CONSUMERS)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(v_empty.index(s), count=CONSUMERS)
        mbarrier.init(staged.index(s), count=1)
    # The consumers' turns to issue wgmmas (PINGPONG): warpgroup w waits on its own, the other passes it on.
    # Warpgroup 0 has the first turn. Two even for one consumer, which never waits on them: its `turns` are
    # indexed all the same.
    turn_ring = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for w in gl.static_range(2):
        mbarrier.init(turn_ring.index(w), count=1)
    if PINGPONG:
        mbarrier.arrive(turn_ring.index(0), count=1)

    # Bytes a K or V stage's "ready" barrier expects: one tile, cartridge box or BLOCK_N // PAGE pages.
    K_BYTES: gl.constexpr = BLOCK_N * HEAD_DIM * ck_desc.dtype.primitive_bitwidth // 8
    CV_BYTES: gl.constexpr = BLOCK_N * HEAD_DIM * cv_desc.dtype.primitive_bitwidth // 8
    LK_BYTES: gl.constexpr = BLOCK_N * HEAD_DIM * lk_desc.dtype.primitive_bitwidth // 8
    LV_BYTES: gl.constexpr = BLOCK_N * HEAD_DIM * lv_desc.dtype.primitive_bitwidth // 8
    rings = (k_ring, cv_ring, lv_ring, st_ring)
    bars = (k_ready, k_empty, staged, v_empty)
    io = (q_ptr, o_ptr, cv_scale_ptr, lv_scale_ptr)
    plan = (tile_req_ptr, tile_row_ptr, qo_indptr_ptr, kv_indptr_ptr, kv_len_ptr, n_tiles, n_kvh, n_programs)
    scalars = (cart_len, qk_scale)
    # Strides are positive: widened without a sign, they take no register of their own through the walks.
    strides = (stride_qt.to(gl.uint32).to(gl.int64), stride_qh, stride_ot.to(gl.uint32).to(gl.int64), stride_oh)
    walk = (cart_len, page_rows, lk_head_cols, lv_head_cols)
    # Constexprs are written out in each partition's arguments: through a tuple variable they would become values.
    if CONSUMERS == 2:
        gl.warp_specialize(
            [
                (_consumer, (0, io, rings, bars, turn_ring, q_ring, plan, scalars, strides, GROUP, HEAD_DIM,
                             BLOCK_M, BLOCK_N, STAGES, CAUSAL, PERSISTENT, CV_SCALE, LV_FP8, PINGPONG)),
                (_consumer, (1, io, rings, bars, turn_ring, q_ring, plan, scalars, strides, GROUP, HEAD_DIM,
                             BLOCK_M, BLOCK_N, STAGES, CAUSAL, PERSISTENT, CV_SCALE, LV_FP8, PINGPONG)),
                (_producer, ((ck_desc, cv_desc, lk_desc, lv_desc), (k_ring, cv_ring, lv_ring),
                             (k_ready, k_empty, v_ready, v_empty), kv_indices_ptr, plan, walk,
                             GROUP, BLOCK_M, BLOCK_N, HEAD_DIM, PAGE, STAGES, CAUSAL, PERSISTENT,
                             K_BYTES, CV_BYTES, LK_BYTES, LV_BYTES)),
                (_stager, ((lv_ring, st_ring), (v_ready, staged), plan, cart_len,
                           LV_FP8, GROUP, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PERSISTENT, STAGER_WARPS)),
            ],
            [4, PRODUCER_WARPS, STAGER_WARPS],
            [CONSUMER_REGISTERS, AUX_REGISTERS_TWO_CONSUMERS, AUX_REGISTERS_TWO_CONSUMERS],
        )  # fmt: skip
    else:
        gl.warp_specialize(
            [
                (_consumer, (0, io, rings, bars, turn_ring, q_ring, plan, scalars, strides, GROUP, HEAD_DIM,
                             BLOCK_M, BLOCK_N, STAGES, CAUSAL, PERSISTENT, CV_SCALE, LV_FP8, PINGPONG)),
                (_producer, ((ck_desc, cv_desc, lk_desc, lv_desc), (k_ring, cv_ring, lv_ring),
                             (k_ready, k_empty, v_ready, v_empty), kv_indices_ptr, plan, walk,
                             GROUP, BLOCK_M, BLOCK_N, HEAD_DIM, PAGE, STAGES, CAUSAL, PERSISTENT,
                             K_BYTES, CV_BYTES, LK_BYTES, LV_BYTES)),
                (_stager, ((lv_ring, st_ring), (v_ready, staged), plan, cart_len,
                           LV_FP8, GROUP, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PERSISTENT, STAGER_WARPS)),
            ],
            [PRODUCER_WARPS, STAGER_WARPS],
            [AUX_REGISTERS_ONE_CONSUMER, AUX_REGISTERS_ONE_CONSUMER],
        )  # fmt: skip
