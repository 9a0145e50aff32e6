"""The serving-engine paths on an SM90 GPU: planning from a vLLM-style block table, and the live KV writer.

Interpreter tests cover the indexing on CPU; these run the compiled kernels (BF16 dots, FP8 conversions).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from _cartridge_attn_check import REL_L2_MAX, RTOL
from cartridge_attn import CartridgeAttention, poison_cascade_states, random_problem, reference_attention
from cartridge_attn.cache_write import write_live_kv
from cartridge_attn.heuristics import cascade_by_default

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
V8, V16 = torch.float8_e4m3fn, torch.bfloat16


@pytest.fixture(autouse=True)
def _sm90() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"qualified on SM90 only; this GPU is {torch.cuda.get_device_capability()}")


def _block_table(pr, extra_cols: int, extra_rows: int) -> torch.Tensor:
    kvp = pr.kv_indptr.tolist()
    n_pages = [b - a for a, b in itertools.pairwise(kvp)]
    width = max(n_pages) + extra_cols
    # Junk beyond each request's pages: page ids the kernel must never read for that request.
    table = torch.randint(0, pr.live_k.shape[0], (len(n_pages) + extra_rows, width), dtype=torch.int32)
    for b, (a, n) in enumerate(zip(kvp[:-1], n_pages, strict=True)):
        table[b, :n] = pr.kv_indices[a : a + n].cpu()
    return table.to(CUDA)


@pytest.mark.parametrize(
    ("q_lens", "live", "cart_v", "live_v"),
    [
        ([1] * 16, [5, 300, 8, 9, 77, 1, 640, 33, 2, 17, 64, 65, 100, 250, 3, 12], V8, V16),
        ([1] * 64, [40 + 7 * i for i in range(64)], V8, V8),
        ([64, 1, 17, 1, 128], [64, 90, 17, 3, 700], V8, V16),
        ([33, 1, 5], [33, 200, 40], V16, V16),
    ],
    ids=["decode16-k16v8", "decode64-live-fp8", "mixed-prefill-decode", "prefill-k16v16"],
)
def test_plan_block_table_matches_reference(q_lens, live, cart_v, live_v) -> None:
    pr = random_problem(q_lens, live, num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=8, cartridge_len=632,
                        cartridge_v_dtype=cart_v, live_v_dtype=live_v, device=CUDA)  # fmt: skip
    table = _block_table(pr, extra_cols=3, extra_rows=2)
    seq_lens = torch.tensor(live, dtype=torch.int32, device=CUDA)
    attn = CartridgeAttention()
    attn.plan_block_table(pr.qo_indptr, q_lens, seq_lens, table, max_seq_len=max(live), seq_lens_bound=live,
                          num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=8, cartridge_len=632,
                          cartridge_v_dtype=cart_v, live_v_dtype=live_v)  # fmt: skip
    out = torch.full_like(pr.q, float("nan"))
    attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, (pr.live_k, pr.live_v), out=out, **pr.run_kwargs())
    torch.cuda.synchronize()
    ref = reference_attention(
        pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(), causal=True, **pr.run_kwargs()
    )
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.float(), ref, rtol=RTOL, atol=RTOL)
    assert float((out.float() - ref).norm() / ref.norm()) < REL_L2_MAX


@pytest.mark.parametrize("v_dtype", [V16, V8], ids=["bf16-v", "fp8-v"])
def test_write_live_kv_into_vllm_layout(v_dtype: torch.dtype) -> None:
    blocks, bs, h, d = 40, 8, 8, 128
    raw = torch.full((blocks, bs, h, 2 * d), float("nan"), dtype=torch.bfloat16, device=CUDA)
    pages = raw  # physical NHD == logical (blocks, H, bs, 2D) transposed back
    k_pages = pages[..., :d]
    v_pages = pages[..., d:] if v_dtype == V16 else pages[..., d:].view(V8)[..., :d]
    n = 50
    key = torch.randn(n + 3, h, d, device=CUDA).to(torch.bfloat16)
    value = (torch.randn(n + 3, h, d, device=CUDA) * 30).to(torch.bfloat16)
    slots = torch.randperm(blocks * bs, device=CUDA)[:n].to(torch.int64)
    slots[7] = -1  # padding
    scale = (torch.rand(h, device=CUDA) + 0.05).float() if v_dtype == V8 else None
    write_live_kv(key, value, k_pages, v_pages, slots, scale)
    torch.cuda.synchronize()
    ok = slots >= 0
    blk, off = slots[ok] // bs, slots[ok] % bs
    torch.testing.assert_close(k_pages[blk, off], key[:n][ok], rtol=0, atol=0)
    if v_dtype == V16:
        torch.testing.assert_close(v_pages[blk, off], value[:n][ok], rtol=0, atol=0)
    else:
        want = (value[:n][ok].float() / scale[None, :, None]).clamp(-448, 448).to(V8)
        assert torch.equal(v_pages[blk, off].view(torch.uint8), want.view(torch.uint8))
    # Nothing else was written: the padding slot's target and every unused slot keep their NaN poison.
    written = torch.zeros(blocks * bs, dtype=torch.bool, device=CUDA)
    written[slots[ok]] = True
    untouched = raw.view(blocks * bs, h, 2 * d)[~written]
    assert torch.isnan(untouched[..., :d].float()).all()


# (real requests, padding requests): batch sizes a CUDA graph is captured for, and replays of smaller batches.
GRAPH_BATCHES = [(1, 0), (3, 1), (13, 3), (40, 24)]


# None takes the dispatch's choice (batch 64 at this bound is a cascade: its two launches, the live walk a
# programmatic dependent of the first, captured as one graph); True and False force the other walk.
GRAPH_CASES = [(*b, None) for b in GRAPH_BATCHES] + [(13, 3, True), (40, 24, False)]


@pytest.mark.parametrize(
    ("real", "pad", "cascade"), GRAPH_CASES,
    ids=[f"b{r}-pad{p}{'' if c is None else '-cascade' if c else '-no-cascade'}" for r, p, c in GRAPH_CASES],
)  # fmt: skip
def test_cuda_graph_of_a_plan_replays_later_batches(real: int, pad: int, cascade: bool | None) -> None:
    """What vLLM's full CUDA graphs do: capture one decode launch over persistent engine buffers (planned, like
    vLLM's capture, with every live length 1 and the engine's longest context as the bound), then for each new
    step write the batch into the same buffers, plan again and replay. The replayed graph must compute every
    new batch, whose live lengths, pages and padding differ from the captured one."""
    from cartridge_attn import DecodeWorkspace
    from cartridge_attn.paging import block_table_to_indptr

    h_q, h_kv, d, ps, t_c, bound, max_batch = 32, 8, 128, 8, 632, 2048, 64
    batch = real + pad
    width = bound // ps
    pool = max_batch * width  # room for every request at the bound
    qsl = torch.zeros(max_batch + 1, dtype=torch.int32, device=CUDA)
    seq_lens = torch.zeros(max_batch, dtype=torch.int32, device=CUDA)
    table = torch.zeros(max_batch, width, dtype=torch.int32, device=CUDA)
    q = torch.empty(max_batch, h_q, d, dtype=V16, device=CUDA)
    out = torch.empty_like(q)
    live_k = torch.empty(pool, ps, h_kv, d, dtype=V16, device=CUDA)
    live_v = torch.empty(pool, ps, h_kv, d, dtype=V8, device=CUDA)
    ck = torch.randn(t_c, h_kv, d, device=CUDA).to(V16)
    cv = (torch.randn(t_c, h_kv, d, device=CUDA) * 0.5).to(V8)
    cv_scale = (torch.rand(h_kv, device=CUDA) + 0.5).float()
    lv_scale = (torch.rand(h_kv, device=CUDA) + 0.5).float()
    ws = DecodeWorkspace(max_batch=max_batch, num_qo_heads=h_q, num_kv_heads=h_kv, head_dim=d, cartridge_len=t_c,
                         max_live=bound, device=CUDA, decode_cascade=cascade)  # fmt: skip
    shape = {"num_qo_heads": h_q, "num_kv_heads": h_kv, "head_dim": d, "page_size": ps, "cartridge_len": t_c,
             "cartridge_v_dtype": V8, "live_v_dtype": V8}  # fmt: skip

    def plan(lens: list[int]) -> CartridgeAttention:
        attn = CartridgeAttention(decode_cascade=cascade)
        attn.plan_block_table(qsl[: batch + 1], [1] * len(lens) + [0] * (batch - len(lens)), seq_lens[:batch],
                              table[:batch], max_seq_len=bound, workspace=ws, **shape)  # fmt: skip
        return attn

    def run(attn: CartridgeAttention) -> None:
        attn.run(q[:batch], ck, cv, (live_k, live_v), cartridge_v_scale=cv_scale, live_v_scale=lv_scale,
                 out=out[:batch])  # fmt: skip

    # Capture state, as vLLM's: every request real, one live token each.
    qsl[: batch + 1] = torch.arange(batch + 1, dtype=torch.int32, device=CUDA)
    seq_lens[:batch] = 1
    table[:batch] = torch.arange(batch, dtype=torch.int32, device=CUDA)[:, None]
    live_k.normal_()
    live_v.copy_(torch.randn(live_v.shape, device=CUDA).to(V8))
    q.normal_()
    captured = plan([1] * batch)
    want_cascade = cascade_by_default(batch, bound) if cascade is None else cascade
    assert bool(captured.plan_info.config.cart_pdl) == want_cascade
    run(captured)  # compiles outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(captured)
    for step in range(3):
        lens = torch.randint(1, bound + 1, (real,)).tolist()
        lens[step % real] = bound  # one request at the bound the graph was planned for
        pages = torch.randperm(pool)[: sum(-(-n // ps) for n in lens)].tolist()
        table.zero_()  # padding rows: vLLM's null block 0
        for b, n in enumerate(lens):
            k = -(-n // ps)
            table[b, :k] = torch.tensor(pages[:k], dtype=torch.int32)
            pages = pages[k:]
        seq_lens.zero_()
        seq_lens[:real] = torch.tensor(lens, dtype=torch.int32)
        qsl.zero_()
        qsl[1 : real + 1] = torch.arange(1, real + 1, dtype=torch.int32)
        qsl[real + 1 : batch + 1] = real
        live_k.normal_()
        live_v.copy_(torch.randn(live_v.shape, device=CUDA).to(V8))
        q.normal_()
        replanned = plan(lens).plan_info
        assert (replanned.config, replanned.grid) == (captured.plan_info.config, captured.plan_info.grid), (
            "a step's plan differs from the captured launch: the graph would replay another variant than planned"
        )
        out.fill_(float("nan"))
        poison_cascade_states(captured)  # the workspace's cascade states: the replayed walk must wait for them
        graph.replay()
        torch.cuda.synchronize()
        kv_indptr, kv_indices, last = block_table_to_indptr(table[:real], seq_lens[:real], ps)
        ref = reference_attention(q[:real], ck, cv, live_k, live_v, qsl[: real + 1], kv_indptr, kv_indices, last,
                                  cartridge_v_scale=cv_scale, live_v_scale=lv_scale, causal=True)  # fmt: skip
        got = out[:real]
        assert not torch.isnan(got).any(), f"step {step}: NaN in a real request's row"
        torch.testing.assert_close(got.float(), ref, rtol=RTOL, atol=RTOL)
        assert float((got.float() - ref).norm() / ref.norm()) < REL_L2_MAX
        assert int(ws.split_count.abs().sum()) == 0, "split arrival counters not re-armed after a replay"
