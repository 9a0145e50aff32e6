"""Page tables, layout helpers and the fp32 reference itself (pure PyTorch, CPU)."""

from __future__ import annotations

import math

import pytest
import torch
from cartridge_attn import (
    block_table_to_indptr,
    build_cascade_layout,
    build_injection_layout,
    live_lengths,
    random_problem,
    reference_attention,
    shared_page_table,
    split_combined_kv,
)
from cartridge_attn.paging import dequantize_v, gather_live


def test_live_lengths_and_block_table_round_trip() -> None:
    bt = torch.tensor([[7, 2, 9, 0], [4, 0, 0, 0], [1, 3, 5, 6]])
    lens = torch.tensor([17, 8, 25])
    indptr, indices, last = block_table_to_indptr(bt, lens, 8)
    assert indptr.tolist() == [0, 3, 4, 8]
    assert indices.tolist() == [7, 2, 9, 4, 1, 3, 5, 6]
    assert last.tolist() == [1, 8, 1]
    assert live_lengths(indptr, last, 8).tolist() == [17, 8, 25]


def test_split_combined_kv_is_a_view() -> None:
    kv = torch.randn(5, 2, 8, 2, 64)
    k, v = split_combined_kv(kv)
    assert k.data_ptr() == kv.data_ptr() and v.data_ptr() == kv[:, 1].data_ptr()
    assert k.shape == (5, 8, 2, 64) and k.stride(0) == 2 * 8 * 2 * 64
    with pytest.raises(ValueError, match="num_pages, 2, page_size"):
        split_combined_kv(torch.randn(5, 8, 2, 64))


@pytest.mark.parametrize("combined", [False, True])
def test_injection_layout_is_cartridge_then_live(combined: bool) -> None:
    pr = random_problem([1, 1, 1], [5, 16, 9], cartridge_len=16, combined=combined)
    lay = build_injection_layout(
        pr.cartridge_k,
        pr.cartridge_v,
        pr.live_k,
        pr.live_v,
        pr.kv_indptr,
        pr.kv_indices,
        pr.kv_last_page_len,
        cartridge_v_scale=pr.cartridge_v_scale,
    )
    k_pages, v_pages = split_combined_kv(lay.kv_cache)
    lens = live_lengths(pr.kv_indptr, pr.kv_last_page_len, 8)
    for b in range(3):
        n = 16 + int(lens[b])
        k = gather_live(k_pages, lay.kv_indptr, lay.kv_indices, b, n)
        v = gather_live(v_pages, lay.kv_indptr, lay.kv_indices, b, n)
        lk = gather_live(pr.live_k, pr.kv_indptr, pr.kv_indices, b, int(lens[b]))
        lv = gather_live(pr.live_v, pr.kv_indptr, pr.kv_indices, b, int(lens[b]))
        assert torch.equal(k, torch.cat([pr.cartridge_k, lk]))
        assert torch.equal(v, torch.cat([dequantize_v(pr.cartridge_v, pr.cartridge_v_scale, torch.bfloat16), lv]))
    assert int(lay.kv_last_page_len[1]) == 8


def test_cascade_layout_shares_one_cartridge_copy() -> None:
    pr = random_problem([1, 1], [5, 20], cartridge_len=24)
    lay = build_cascade_layout(
        pr.cartridge_k,
        pr.cartridge_v,
        pr.live_k,
        pr.live_v,
        pr.kv_indptr,
        pr.kv_indices,
        pr.kv_last_page_len,
        cartridge_v_scale=pr.cartridge_v_scale,
    )
    k_pages, _ = split_combined_kv(lay.kv_cache)
    assert lay.kv_cache.shape[0] == 3 + 1 + 3  # 3 cartridge pages + live pages, no per-request copies
    assert torch.equal(gather_live(k_pages, lay.shared_indptr, lay.shared_indices, 0, 24), pr.cartridge_k)
    lk = gather_live(pr.live_k, pr.kv_indptr, pr.kv_indices, 1, 20)
    assert torch.equal(gather_live(k_pages, lay.unique_indptr, lay.unique_indices, 1, 20), lk)


def test_shared_page_table_reads_what_injection_reads_without_copies(test_seed: int) -> None:
    gen = torch.Generator().manual_seed(test_seed)
    live = [int(torch.randint(1, 40, (), generator=gen)) for _ in range(4)]
    pr = random_problem([1] * 4, live, cartridge_len=24, seed=test_seed)
    args = (pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, pr.kv_indptr, pr.kv_indices, pr.kv_last_page_len)
    shared = build_cascade_layout(*args, cartridge_v_scale=pr.cartridge_v_scale)
    injected = build_injection_layout(*args, cartridge_v_scale=pr.cartridge_v_scale)
    indptr, indices, last = shared_page_table(shared)
    assert torch.equal(last, injected.kv_last_page_len) and torch.equal(indptr, injected.kv_indptr.to(torch.int32))
    n_cart = 24 // 8
    sk, sv = split_combined_kv(shared.kv_cache)
    ik, iv = split_combined_kv(injected.kv_cache)
    for b in range(4):
        assert indices[int(indptr[b]) : int(indptr[b]) + n_cart].tolist() == list(range(n_cart))  # one copy, shared
        n = 24 + live[b]
        assert torch.equal(
            gather_live(sk, indptr, indices, b, n), gather_live(ik, injected.kv_indptr, injected.kv_indices, b, n)
        )
        assert torch.equal(
            gather_live(sv, indptr, indices, b, n), gather_live(iv, injected.kv_indptr, injected.kv_indices, b, n)
        )
    assert shared.kv_cache.shape[0] < injected.kv_cache.shape[0]  # the pool holds the cartridge once


def test_reference_matches_sdpa_on_injection_layout() -> None:
    # An independent path: the injected sequence through torch's SDPA with an explicit mask.
    pr = random_problem([3, 1, 4], [6, 9, 4], num_qo_heads=8, num_kv_heads=2, cartridge_len=8)
    ref = reference_attention(
        pr.q,
        pr.cartridge_k,
        pr.cartridge_v,
        pr.live_k,
        pr.live_v,
        *pr.page_table(),
        cartridge_v_scale=pr.cartridge_v_scale,
    )
    lay = build_injection_layout(
        pr.cartridge_k,
        pr.cartridge_v,
        pr.live_k,
        pr.live_v,
        pr.kv_indptr,
        pr.kv_indices,
        pr.kv_last_page_len,
        cartridge_v_scale=pr.cartridge_v_scale,
        dtype=torch.float32,
    )
    k_pages, v_pages = split_combined_kv(lay.kv_cache)
    qo = pr.qo_indptr.tolist()
    for b, n_live in enumerate([6, 9, 4]):
        n_q, n_kv = qo[b + 1] - qo[b], 8 + n_live
        k = gather_live(k_pages, lay.kv_indptr, lay.kv_indices, b, n_kv).transpose(0, 1)
        v = gather_live(v_pages, lay.kv_indptr, lay.kv_indices, b, n_kv).transpose(0, 1)
        q = pr.q[qo[b] : qo[b + 1]].float().transpose(0, 1)
        mask = torch.ones(n_q, n_kv, dtype=torch.bool).tril(diagonal=n_kv - n_q)  # bottom-right causal
        got = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(4, 0), v.repeat_interleave(4, 0), attn_mask=mask, scale=1 / math.sqrt(64)
        )
        torch.testing.assert_close(got.transpose(0, 1), ref[qo[b] : qo[b + 1]], rtol=1e-5, atol=1e-5)


def test_reference_causal_alignment_is_bottom_right() -> None:
    # 4 queries over 4 live tokens: the last query sees everything, the first only live token 0
    # (plus the whole cartridge), so only the first three differ from the non-causal result.
    pr = random_problem([4], [4], cartridge_len=8, num_qo_heads=2, num_kv_heads=2, cartridge_v_dtype=torch.bfloat16)
    full = reference_attention(
        pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(), causal=False
    )
    causal = reference_attention(pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table())
    torch.testing.assert_close(causal[3], full[3])
    for t in range(3):
        assert not torch.allclose(causal[t], full[t])
