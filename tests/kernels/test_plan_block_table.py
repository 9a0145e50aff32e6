"""`CartridgeAttention.plan_block_table`: planning from a vLLM-style block table, run on the same kernel.

Every batch is fresh (seeded from the test id): mixed decode and prefill requests, live lengths 1..60, page
sizes 8 and 16, GQA groups 1/2/4, BF16 and FP8 cartridge and live V. The block table has more columns than
any request needs and more rows than the batch, shuffled page ids, and its padding points at pages whose
every slot is NaN (as is every non-live slot of the pool), so reading past a request's pages shows. The
output must match the fp32 reference and, bit for bit, ``plan()`` + ``run()`` on the same batch written as
an indptr page table.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _cartridge_attn_check import ATOL, REL_L2_MAX, RTOL, run_fused
from _serving_kernels import poison_unused_slots, randint, run_file_in_fresh_process, seeded_generator
from cartridge_attn import (
    CartridgeAttention,
    DecodeWorkspace,
    UnsupportedLayoutError,
    api,
    random_problem,
    reference_attention,
)
from cartridge_attn.heuristics import cascade_by_default

BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
NUM_KV_HEADS, HEAD_DIM = 2, 64

# (batch kind, page size, cartridge_len, GQA group, cartridge V, live V, causal, block-table layout)
CASES = {
    "decode-p8-g1-cv8-lv16": ("decode", 8, 16, 1, FP8, BF16, True, "rows"),
    "decode-p16-g4-cv16-lv8": ("decode", 16, 32, 4, BF16, FP8, True, "column-slice"),
    "decode-packed-p8-g2-cv8-lv8": ("decode-packed", 8, 32, 2, FP8, FP8, True, "rows"),
    "mixed-p8-g1-cv16-lv16": ("mixed", 8, 32, 1, BF16, BF16, True, "rows"),
    "mixed-p8-g2-cv8-lv16": ("mixed", 8, 16, 2, FP8, BF16, True, "column-slice"),
    "mixed-p16-g4-cv8-lv8": ("mixed", 16, 16, 4, FP8, FP8, True, "rows"),
    "mixed-p16-g2-cv16-lv8": ("mixed", 16, 32, 2, BF16, FP8, True, "rows"),
    "mixed-p8-g4-cv16-lv16": ("mixed", 8, 16, 4, BF16, BF16, True, "rows"),
    "mixed-p16-g1-cv8-lv8-noncausal": ("mixed", 16, 32, 1, FP8, FP8, False, "rows"),
    "prefill-p8-g4-cv16-lv8": ("prefill", 8, 16, 4, BF16, FP8, True, "column-slice"),
    "prefill-p16-g2-cv8-lv16": ("prefill", 16, 16, 2, FP8, BF16, True, "rows"),
}


def draw_batch(gen: torch.Generator, kind: str) -> tuple[list[int], list[int]]:
    """(query lengths, live lengths); live lengths include this step's queries (vLLM's seq_lens)."""
    # 33 >= 32: the decode default packs 2 requests per program; odd, so the last pack is half empty.
    batch = {"decode-packed": 33, "decode": randint(gen, 1, 6)}.get(kind) or randint(gen, 2, 6)
    if kind.startswith("decode"):
        q_lens = [1] * batch
    elif kind == "prefill":
        q_lens = [randint(gen, 2, 20) for _ in range(batch)]
    else:  # at least one decode and one prefill request, in random places
        q_lens = [1 if randint(gen, 0, 1) else randint(gen, 2, 20) for _ in range(batch)]
        q_lens[0], q_lens[-1] = 1, randint(gen, 2, 20)
        perm = torch.randperm(batch, generator=gen).tolist()
        q_lens = [q_lens[i] for i in perm]
    # Some fresh prefills (live == queries), the rest with history; 1..60 live tokens.
    live = [n if randint(gen, 0, 3) == 0 else randint(gen, n, 60) for n in q_lens]
    return q_lens, live


def block_table_from(pr, gen: torch.Generator, layout: str) -> torch.Tensor:
    """vLLM-style table: row b = request b's pages in order; padding, spare rows and columns point at spare pages."""
    indptr, indices = pr.kv_indptr.cpu().tolist(), pr.kv_indices.cpu().tolist()
    batch = len(indptr) - 1
    n_pool = pr.live_k.shape[0]
    spare = torch.tensor(sorted(set(range(n_pool)) - set(indices)), dtype=torch.int32)
    assert spare.numel() > 0
    width = max(indptr[b + 1] - indptr[b] for b in range(batch)) + randint(gen, 1, 3)
    rows = batch + randint(gen, 1, 3)
    full_width = width + (randint(gen, 1, 4) if layout == "column-slice" else 0)
    table = spare[torch.randint(spare.numel(), (rows, full_width), generator=gen)]
    for b in range(batch):
        pages = indices[indptr[b] : indptr[b + 1]]
        table[b, : len(pages)] = torch.tensor(pages, dtype=torch.int32)
    bt = table[:, :width]
    if layout == "column-slice":
        assert bt.stride(0) > bt.shape[1]
    return bt.to(pr.q.device)


def padded(t: torch.Tensor, extra: int) -> torch.Tensor:
    """``t`` followed by ``extra`` garbage entries (engines pad their per-request arrays)."""
    return torch.cat([t, torch.full((extra,), 1_000_000, dtype=t.dtype, device=t.device)])


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).nan_to_num(nan=float("inf")).norm() / ref.norm())


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_block_table_matches_reference_and_indptr_plan(
    case: str, kernel_device: torch.device, request: pytest.FixtureRequest
) -> None:
    kind, page_size, cart_len, group, cart_v, live_v, causal, layout = CASES[case]
    gen = seeded_generator(request.node.nodeid)
    q_lens, live = draw_batch(gen, kind)
    pr = random_problem(
        q_lens,
        live,
        num_qo_heads=NUM_KV_HEADS * group,
        num_kv_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        page_size=page_size,
        cartridge_len=cart_len,
        cartridge_v_dtype=cart_v,
        live_v_dtype=live_v,
        spare_pages=4,
        device=kernel_device,
        seed=randint(gen, 0, 2**40),
    )
    poison_unused_slots(pr)
    batch = len(q_lens)
    bt = block_table_from(pr, gen, layout)
    qsl = padded(pr.qo_indptr, randint(gen, 0, 3))
    seq_lens = padded(torch.tensor(live, dtype=torch.int32, device=kernel_device), randint(gen, 0, 3))
    max_seq_len = max(live) + randint(gen, 0, 8)
    bound = [n + randint(gen, 0, 5) for n in live] if randint(gen, 0, 1) else None

    attn = CartridgeAttention()
    plan = attn.plan_block_table(
        qsl, q_lens, seq_lens, bt, max_seq_len=max_seq_len, seq_lens_bound=bound, causal=causal, **pr.plan_kwargs()
    )
    want_mode = "decode" if all(n == 1 for n in q_lens) else "prefill"
    assert (plan.mode, plan.batch, plan.total_q) == (want_mode, batch, sum(q_lens))
    # The table is read in place: no gather, row b starts at b * row stride.
    kv_indices = plan.tensors["kv_indices"]
    assert kv_indices.untyped_storage().data_ptr() == bt.untyped_storage().data_ptr()
    assert plan.tensors["kv_indptr"].cpu().tolist() == [b * bt.stride(0) for b in range(batch + 1)]

    out = torch.full_like(pr.q, float("nan"))
    got = attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())
    assert got is out
    if out.is_cuda:
        torch.cuda.synchronize()
    assert not torch.isnan(out).any(), "NaN in the output: an unwritten row, or a read of a non-live slot/page"

    ref = reference_attention(
        pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(), causal=causal, **pr.run_kwargs()
    )
    torch.testing.assert_close(out.float(), ref, rtol=RTOL, atol=ATOL)
    assert rel_l2(out, ref) < REL_L2_MAX

    # The same batch through plan() on the equivalent indptr page table: same kernel, same launch.
    indptr_run = run_fused(pr, causal=causal)
    assert not torch.isnan(indptr_run.out).any()
    if indptr_run.attn.plan_info.config == plan.config:
        assert torch.equal(out, indptr_run.out), "plan_block_table and plan() disagree on the same batch"
    else:
        torch.testing.assert_close(out.float(), indptr_run.out.float(), rtol=RTOL, atol=ATOL)


# ---- CUDA-graph padding and a persistent workspace -------------------------------------------------
# (real requests, padding requests, page size, GQA group, live V, live-length bound): a replayed graph of a
# larger batch ends in padding requests with 0 queries and 0 live tokens. A graph plans for the engine's longest
# context, not the step's: with a bound of 600 the batch of 4 splits its keys 16 ways (states in the workspace),
# and live lengths of at most 60 leave most of those ranges empty; the batch of 8 splits a short context 2-4 ways.
# The packed batch does not split. The cascade's padding rows attend the cartridge in the cascade launch, and its
# states live in the workspace (the packed batch of 64 is a cascade by default).
PADDED_CASES = {
    "b1-pad3-split-p8-g4": (1, 3, 8, 4, BF16, 600),
    "b5-pad3-split-p16-g2-lv8": (5, 3, 16, 2, FP8, 60),
    "b33-pad31-packed-p8-g1": (33, 31, 8, 1, BF16, 60),
    "b9-pad7-cascade-split-p8-g3": (9, 7, 8, 3, BF16, 60),
}


@pytest.mark.parametrize("case", list(PADDED_CASES), ids=list(PADDED_CASES))
def test_padded_decode_with_a_workspace_matches_reference(
    case: str, kernel_device: torch.device, request: pytest.FixtureRequest
) -> None:
    real, pad, page_size, group, live_v, bound = PADDED_CASES[case]
    gen = seeded_generator(request.node.nodeid)
    cart_len = 2 * page_size
    live = [randint(gen, 1, 60) for _ in range(real)]
    pr = random_problem([1] * real, live, num_qo_heads=NUM_KV_HEADS * group, num_kv_heads=NUM_KV_HEADS,
                        head_dim=HEAD_DIM, page_size=page_size, cartridge_len=cart_len, cartridge_v_dtype=FP8,
                        live_v_dtype=live_v, spare_pages=4, device=kernel_device,
                        seed=randint(gen, 0, 2**40))  # fmt: skip
    poison_unused_slots(pr)
    batch = real + pad
    bt = block_table_from(pr, gen, "rows")
    bt = torch.cat([bt[:real], torch.zeros(pad, bt.shape[1], dtype=bt.dtype, device=bt.device)])  # vLLM's null block
    qsl = torch.cat([pr.qo_indptr, torch.full((pad,), real, dtype=torch.int32, device=kernel_device)])
    seq_lens = torch.tensor(live + [0] * pad, dtype=torch.int32, device=kernel_device)
    bound += randint(gen, 0, 40)
    kw = pr.plan_kwargs()
    cascade = True if "cascade" in case else None
    ws = DecodeWorkspace(max_batch=batch + randint(gen, 0, 8), num_qo_heads=kw["num_qo_heads"],
                         num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM, cartridge_len=cart_len, max_live=bound,
                         device=kernel_device, decode_cascade=cascade)  # fmt: skip
    attn = CartridgeAttention(decode_cascade=cascade)
    plan = attn.plan_block_table(qsl, [1] * real + [0] * pad, seq_lens, bt, max_seq_len=bound, workspace=ws, **kw)
    assert (plan.mode, plan.batch, plan.total_q) == ("decode", batch, batch)
    for name in ("kv_indptr", "split_o", "split_ml", "split_count", "cart_o", "cart_ml"):
        base = {"kv_indptr": ws.row_starts(bt.stride(0), batch)}.get(name, getattr(ws, name, None))
        assert plan.tensors[name].untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), name
    q = torch.cat([pr.q, torch.randn(pad, *pr.q.shape[1:], device=kernel_device).to(pr.q.dtype)])
    for launch in range(2):  # the second launch finds the counters re-armed
        out = torch.full_like(q, float("nan"))
        attn.run(q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())
        if out.is_cuda:
            torch.cuda.synchronize()
        assert not torch.isnan(out).any(), f"launch {launch}: NaN (a padding request read a page, or a row unwritten)"
        ref = reference_attention(pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(),
                                  causal=True, **pr.run_kwargs())  # fmt: skip
        torch.testing.assert_close(out[:real].float(), ref, rtol=RTOL, atol=ATOL)
        assert int(ws.split_count.abs().sum()) == 0, "arrival counters not re-armed"
    assert (plan.config.splits > 1) == ("split" in case), plan.config
    # The packed batch of 64 is a cascade by default too (heuristics.cascade_by_default).
    assert bool(plan.config.cart_rows) == bool(cascade or cascade_by_default(batch, bound)), plan.config


def test_workspace_refuses_a_batch_beyond_its_size() -> None:
    ws = DecodeWorkspace(max_batch=2, num_qo_heads=4, num_kv_heads=2, head_dim=HEAD_DIM, cartridge_len=16,
                         max_live=64, device="cpu")  # fmt: skip
    kw = {**_valid_inputs(), "query_lens": [1, 1, 1], "query_start_loc": _i32(0, 1, 2, 3),
          "seq_lens": _i32(5, 6, 7), "block_table": torch.zeros(3, 3, dtype=torch.int32)}  # fmt: skip
    args = [kw.pop(k) for k in ("query_start_loc", "query_lens", "seq_lens", "block_table")]
    with pytest.raises(UnsupportedLayoutError, match="batch for this decode workspace"):
        CartridgeAttention().plan_block_table(*args, workspace=ws, **kw)


def test_workspace_and_wrapper_must_agree_on_the_cascade() -> None:
    # A workspace sized without cascade states would fail later with a room error that does not name the cause.
    kw = {**_valid_inputs(), "query_lens": [1, 1], "query_start_loc": _i32(0, 1, 2), "seq_lens": _i32(5, 6),
          "block_table": torch.zeros(2, 3, dtype=torch.int32)}  # fmt: skip
    args = [kw.pop(k) for k in ("query_start_loc", "query_lens", "seq_lens", "block_table")]
    for ws_flag, attn_flag in ((None, True), (True, None), (False, True)):
        ws = DecodeWorkspace(max_batch=2, num_qo_heads=4, num_kv_heads=2, head_dim=HEAD_DIM, cartridge_len=16,
                             max_live=64, device="cpu", decode_cascade=ws_flag)  # fmt: skip
        with pytest.raises(UnsupportedLayoutError, match="workspace decode_cascade"):
            CartridgeAttention(decode_cascade=attn_flag).plan_block_table(*args, workspace=ws, **kw)
    with pytest.raises(UnsupportedLayoutError, match="decode_cascade"):
        CartridgeAttention(decode_cascade=1)  # type: ignore[arg-type]


def test_a_workspace_for_a_long_bound_holds_the_cascade_a_short_step_plans(kernel_device: torch.device) -> None:
    # Below the packing batch the default cascade stops at CASCADE_UNPACKED_MAX_LIVE live tokens: a workspace sized
    # for a longer bound (no cascade there) must still hold the states of a step planned for fewer live keys.
    batch, bound, short = 20, 4096, 300
    assert cascade_by_default(batch, short) and not cascade_by_default(batch, bound)
    ws = DecodeWorkspace(max_batch=batch, num_qo_heads=32, num_kv_heads=8, head_dim=128, cartridge_len=632,
                         max_live=bound, device=kernel_device)  # fmt: skip
    i32 = {"dtype": torch.int32, "device": kernel_device}
    plan = CartridgeAttention().plan_block_table(
        torch.arange(batch + 1, **i32), [1] * batch, torch.full((batch,), short, **i32),
        torch.arange(batch * 38, **i32).reshape(batch, 38), max_seq_len=short, num_qo_heads=32, num_kv_heads=8,
        head_dim=128, page_size=8, cartridge_len=632, workspace=ws,
    )  # fmt: skip
    assert plan.config.cart_rows and plan.tensors["cart_o"].untyped_storage().data_ptr() == ws.cart_o.data_ptr()


# ---- rejected inputs: fail closed, naming the field ----------------------------------------------
def _valid_inputs() -> dict:
    q_lens, live = [1, 3], [5, 9]
    return {
        "query_start_loc": torch.tensor([0, 1, 4], dtype=torch.int32),
        "query_lens": q_lens,
        "seq_lens": torch.tensor(live, dtype=torch.int32),
        "block_table": torch.arange(6, dtype=torch.int32).reshape(2, 3),
        "max_seq_len": max(live),
        "num_qo_heads": 4,
        "num_kv_heads": 2,
        "head_dim": HEAD_DIM,
        "page_size": 8,
        "cartridge_len": 16,
    }


def _i32(*v: int) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.int32)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"seq_lens": torch.tensor([5, 9], dtype=torch.int64)}, "seq_lens"),
        ({"seq_lens": _i32(5)}, "seq_lens"),  # shorter than the batch
        ({"query_start_loc": torch.tensor([0, 1, 4], dtype=torch.int64)}, "query_start_loc"),
        ({"block_table": torch.arange(3, dtype=torch.int32).reshape(1, 3)}, "block_table"),  # 1 row, batch 2
        ({"block_table": torch.arange(6, dtype=torch.int64).reshape(2, 3)}, "block_table"),
        ({"block_table": torch.arange(12, dtype=torch.int32).reshape(2, 6)[:, ::2]}, "block_table innermost stride"),
        ({"query_lens": [0, 1], "query_start_loc": _i32(0, 0, 1)}, "query_lens"),  # zero queries, not trailing
        ({"query_lens": [3, 0], "query_start_loc": _i32(0, 3, 3)}, "query_lens"),  # padding after a prefill
        ({"query_lens": [], "query_start_loc": _i32(0)}, "query_lens"),
        ({"cartridge_len": 20}, "cartridge_len"),  # not a multiple of page_size 8
        ({"cartridge_len": 24, "page_size": 16}, "cartridge_len"),
        ({"page_size": 32, "cartridge_len": 32}, "page_size"),
        ({"num_qo_heads": 34}, "GQA group size"),  # group 17
    ],
    ids=[
        "seq_lens-int64",
        "seq_lens-short",
        "query_start_loc-int64",
        "block_table-too-few-rows",
        "block_table-int64",
        "block_table-strided-columns",
        "zero-queries-before-a-request",
        "padding-in-a-prefill-batch",
        "empty-batch",
        "cartridge_len-20-page-8",
        "cartridge_len-24-page-16",
        "page_size-32",
        "group-17",
    ],
)
def test_bad_inputs_are_rejected_naming_the_field(change: dict, field: str) -> None:
    kw = {**_valid_inputs(), **change}
    args = [kw.pop(k) for k in ("query_start_loc", "query_lens", "seq_lens", "block_table")]
    attn = CartridgeAttention()
    with pytest.raises(UnsupportedLayoutError) as exc:
        attn.plan_block_table(*args, **kw)
    assert exc.value.what == field, str(exc.value)
    assert field in str(exc.value)
    with pytest.raises(Exception, match="before plan"):
        _ = attn.plan_info  # a rejected plan leaves nothing planned


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA host runs these tests on the compiled kernel")
@pytest.mark.skipif(api.interpreter_usable(), reason="the interpreter tests already run in this process")
def test_in_a_fresh_interpreter_process() -> None:
    run_file_in_fresh_process(Path(__file__), min_passed=len(CASES) + 13 + len(PADDED_CASES))
