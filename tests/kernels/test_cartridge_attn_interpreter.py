"""The fused kernel on small shapes: indexing, paging, masking, packing and GQA groups, in either execution mode.

Under the Triton interpreter (hosts without CUDA) every dot runs on fp32 operands (the interpreter's bf16 dot
is wrong), so there these tests check *which* keys and values are combined, not the rounding of the matrix
units; compiled on an SM90 GPU (``pytest -m kernel``, ``nox -s gpu``) the same cases run with bf16 dots against
the same fp32 reference and tolerances. Numerics on Qwen-sized shapes are in test_cartridge_attn_gpu.py.
Shapes are tiny so that the file runs in about a minute on two cores under the interpreter.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _cartridge_attn_check import Outcome, assert_matches, run_fused
from cartridge_attn import AttentionProblem, decode_config, kernel_identity, prefill_config, random_problem
from cartridge_attn.errors import UnsupportedLayoutError


@pytest.mark.parametrize("reqs", [1, 2, 4])
def test_decode_packs_requests(reqs: int, kernel_device: torch.device) -> None:
    # Uneven live lengths (1 token, several pages, one partial page) in one packed program.
    pr = random_problem(
        [1] * 5, [1, 30, 8, 17, 3], num_qo_heads=8, num_kv_heads=2, cartridge_len=24, device=kernel_device
    )
    cfg = decode_config(4, 64, 5, 30, reqs=reqs, block_n=16 * reqs)
    o = run_fused(pr, mode="decode", config=cfg)
    assert o.attn.plan_info.grid == (-(-5 // reqs), 2)
    assert_matches(o)


@pytest.mark.parametrize(
    ("q_lens", "live_lens", "block_m", "block_n"),
    [
        ([3, 1, 7], [5, 17, 9], 16, 16),  # tiles straddle tokens (G=4 rows per token) and pages
        ([20], [40], 32, 16),  # several unmasked live tiles before the diagonal
        ([6, 9], [6, 9], 16, 32),  # the suffix is the whole live sequence (fresh prefill)
    ],
)
def test_prefill_causal(
    q_lens: list[int], live_lens: list[int], block_m: int, block_n: int, kernel_device: torch.device
) -> None:
    pr = random_problem(q_lens, live_lens, cartridge_len=16, device=kernel_device)
    o = run_fused(pr, mode="prefill", config=prefill_config(4, 64, block_m=block_m, block_n=block_n, num_warps=4))
    assert_matches(o)


def test_prefill_not_causal_page16_group1(kernel_device: torch.device) -> None:
    pr = random_problem(
        [4, 2], [20, 35], num_qo_heads=2, num_kv_heads=2, page_size=16, cartridge_len=32, device=kernel_device
    )
    o = run_fused(pr, mode="prefill", causal=False, config=prefill_config(1, 64, block_m=16, block_n=16, num_warps=4))
    assert_matches(o)


def test_decode_and_prefill_paths_agree(kernel_device: torch.device) -> None:
    pr = random_problem([1, 1, 1], [9, 2, 25], cartridge_len=8, device=kernel_device)
    dec = run_fused(pr, mode="decode", config=decode_config(4, 64, 3, 25, reqs=2, block_n=32))
    pre = run_fused(pr, mode="prefill", config=prefill_config(4, 64, block_m=16, block_n=16, num_warps=4))
    assert_matches(dec)
    assert_matches(pre)
    torch.testing.assert_close(dec.out.float(), pre.out.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    ("cart_v", "live_v", "combined"),
    [
        (torch.float8_e4m3fn, torch.bfloat16, True),  # K16/V8 cartridge, FlashInfer combined live cache
        (torch.bfloat16, torch.float8_e4m3fn, False),  # V16 cartridge, FP8 live V with scale
    ],
)
def test_value_dtypes_and_layouts(
    cart_v: torch.dtype, live_v: torch.dtype, combined: bool, kernel_device: torch.device
) -> None:
    pr = random_problem(
        [2, 1],
        [11, 20],
        cartridge_v_dtype=cart_v,
        live_v_dtype=live_v,
        combined=combined,
        cartridge_len=16,
        device=kernel_device,
    )
    assert_matches(run_fused(pr, config=prefill_config(4, 64, block_m=16, block_n=16, num_warps=4)))


def test_fp16_head_dim_128(kernel_device: torch.device) -> None:
    pr = random_problem([1, 1], [9, 3], head_dim=128, dtype=torch.float16, cartridge_len=8, device=kernel_device)
    assert_matches(run_fused(pr, config=decode_config(4, 128, 2, 9, reqs=2, block_n=32)))


@pytest.mark.parametrize("group", [3, 5, 6, 7, 12])
def test_any_gqa_group_in_decode_plain_and_packed(group: int, kernel_device: torch.device) -> None:
    # Rows of a KV head padded to the 16-row tile; packed requests each own `group` rows of it.
    live = [1, 30, 8, 17, 3]
    pr = random_problem([1] * 5, live, num_qo_heads=2 * group, num_kv_heads=2, cartridge_len=24, device=kernel_device)
    for reqs in (1, 2):
        cfg = decode_config(group, 64, 5, 30, reqs=reqs, block_n=32)
        o = run_fused(pr, mode="decode", config=cfg)
        assert o.attn.plan_info.config.reqs_per_program == (reqs if 2 * group <= 16 else 1)
        assert_matches(o)


@pytest.mark.parametrize("group", [3, 5, 7])
def test_any_gqa_group_in_prefill(group: int, kernel_device: torch.device) -> None:
    # 16-row tiles split tokens mid-way (16 is no multiple of the group), across pages and the causal diagonal.
    pr = random_problem([3, 1, 7], [5, 17, 9], num_qo_heads=2 * group, num_kv_heads=2, cartridge_len=16,
                        device=kernel_device)  # fmt: skip
    o = run_fused(pr, mode="prefill", config=prefill_config(group, 64, block_m=16, block_n=16, num_warps=4))
    assert_matches(o)


@pytest.mark.parametrize("splits", [2, 4, 16])
def test_split_decode_combines_every_range_exactly_and_rearms(splits: int, kernel_device: torch.device) -> None:
    # 1-token and page-edge suffixes leave the last splits of a short request empty; a second launch of the
    # same plan needs the arrival counters re-armed by the first.
    live = [1, 30, 8, 17, 200]
    pr = random_problem([1] * 5, live, num_qo_heads=8, num_kv_heads=2, cartridge_len=24, device=kernel_device,
                        cartridge_v_dtype=torch.float8_e4m3fn, live_v_dtype=torch.float8_e4m3fn)  # fmt: skip
    cfg = decode_config(4, 64, 5, 200, splits=splits, block_n=16)
    first = run_fused(pr, mode="decode", config=cfg)
    assert first.attn.plan_info.grid == (5 * splits, 2)
    assert_matches(first)
    assert int(first.attn.plan_info.tensors["split_count"].sum()) == 0
    again = launch_again(first, pr)
    assert torch.equal(again.view(torch.int16), first.out.view(torch.int16))


def launch_again(o: Outcome, pr: AttentionProblem) -> torch.Tensor:
    out = torch.full_like(pr.q, float("nan"))
    o.attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())
    return out


@pytest.mark.parametrize(("reqs", "splits"), [(2, 2), (2, 4), (4, 8)])
def test_packed_split_decode_matches_the_reference(reqs: int, splits: int, kernel_device: torch.device) -> None:
    # Requests of very different lengths share a program: ranges of live keys only, past the short ones' ends,
    # leave those requests' rows with no key at all in that range (their state must weigh nothing, not be NaN).
    # NaN in the cache's free slots and a batch that is no multiple of the packing.
    live = [1, 190, 3, 64, 17, 200, 9]
    pr = random_problem([1] * len(live), live, num_qo_heads=8, num_kv_heads=2, cartridge_len=24,
                        device=kernel_device)  # fmt: skip
    pr.poison_free_slots()
    cfg = decode_config(4, 64, len(live), max(live), reqs=reqs, splits=splits, block_n=16 * reqs)
    assert (cfg.reqs_per_program, cfg.splits) == (reqs, splits)
    first = run_fused(pr, mode="decode", config=cfg)
    assert first.attn.plan_info.grid == (-(-len(live) // reqs) * splits, 2)
    assert_matches(first)
    assert int(first.attn.plan_info.tensors["split_count"].sum()) == 0
    again = launch_again(first, pr)
    assert torch.equal(again.view(torch.int16), first.out.view(torch.int16))


@pytest.mark.parametrize(
    ("group", "cart_rows", "cart_splits", "reqs", "splits"),
    [
        (4, 16, 1, 1, 1),  # one range; 4 requests per row tile
        (4, 16, 3, 2, 1),  # ragged ranges (40 keys in 16-key tiles); packed live walk
        (3, 32, 8, 1, 4),  # group 3: tiles cut requests mid-way; empty cascade ranges; split live walk
        (4, 64, 2, 2, 2),  # one tile holds every request's rows; packed and split live walk
    ],
)
def test_decode_cascade_matches_the_reference(
    group: int, cart_rows: int, cart_splits: int, reqs: int, splits: int, kernel_device: torch.device
) -> None:
    # Uneven live lengths, NaN in the cache's free slots, an FP8 cartridge V with its scale; a second launch of the
    # same plan gives the same bits (the cascade's states are rewritten, the split counters re-armed).
    live = [1, 30, 8, 17, 3, 45, 2]
    pr = random_problem([1] * len(live), live, num_qo_heads=2 * group, num_kv_heads=2, cartridge_len=40,
                        device=kernel_device, cartridge_v_dtype=torch.float8_e4m3fn)  # fmt: skip
    pr.poison_free_slots()
    cfg = decode_config(group, 64, len(live), max(live), reqs=reqs, splits=splits, block_n=16 * reqs,
                        cart_rows=cart_rows, cart_splits=cart_splits)  # fmt: skip
    assert (cfg.cart_rows, cfg.cart_splits, cfg.reqs_per_program, cfg.splits) == (cart_rows, cart_splits, reqs, splits)
    first = run_fused(pr, mode="decode", config=cfg)
    assert_matches(first)
    assert first.attn.last_cascade_compiled is not None or not torch.cuda.is_available()
    assert kernel_identity(first.attn)["specialization"].endswith(f"c{cart_rows}x{cart_splits}p")
    assert int(first.attn.plan_info.tensors["split_count"].sum()) == 0
    again = launch_again(first, pr)
    assert torch.equal(again.view(torch.int16), first.out.view(torch.int16))


@pytest.mark.parametrize(
    ("live_lens", "reqs", "block_n"),
    [
        ([5, 1, 9, 17, 8] + [3] * 28, 2, 128),  # batch 33: the tuned decode packs 2 requests per program
        ([600, 7], 1, 64),  # batch 2 x 2 KV heads leaves SMs idle: 16 ranges of <= 64 keys, one tile each
        ([9, 1, 16, 17], 1, 128),  # small batch, short suffixes: the plain decode configuration
    ],
    ids=["packed-b33", "split-b2", "plain-b4"],
)
def test_each_default_decode_specialization_matches_the_reference(
    live_lens: list[int], reqs: int, block_n: int, kernel_device: torch.device
) -> None:
    # No explicit config: what `plan` dispatches by itself (cartridge_attn.dispatch lists these regions).
    pr = random_problem(
        [1] * len(live_lens), live_lens, num_qo_heads=8, num_kv_heads=2, cartridge_len=16, device=kernel_device
    )
    o = run_fused(pr, mode="decode")
    cfg = o.attn.plan_info.config
    assert (cfg.reqs_per_program, cfg.block_n) == (reqs, block_n)
    assert_matches(o)
    # The report names the compiled variant a launch used (cartridge_attn.dispatch.Specialization).
    assert kernel_identity(o.attn)["specialization"].endswith(f"/{cfg.tag}")
    assert (cfg.splits > 1) == (len(live_lens) == 2)  # only the tiny grid splits


@pytest.mark.parametrize(("q_lens", "live_lens"), [([3, 1, 7], [5, 17, 9]), ([20], [40])])
def test_prefill_warp_specialized(q_lens: list[int], live_lens: list[int], kernel_device: torch.device) -> None:
    # The warp-specialized loops (compiled on SM90 as producer + consumer warpgroups) combine the same keys; the
    # variant is its own specialization, so the numerics envelope can qualify it apart from the default.
    pr = random_problem(q_lens, live_lens, cartridge_len=40, device=kernel_device)
    cfg = prefill_config(4, 64, block_m=16, block_n=16, num_warps=4, warp_specialize=True)
    o = run_fused(pr, mode="prefill", config=cfg)
    assert_matches(o)
    identity = kernel_identity(o.attn)
    assert identity["config"]["warp_specialize"] is True and identity["specialization"].endswith("ws")


@pytest.mark.parametrize(
    ("q_lens", "live_lens", "cartridge_len", "ws"),
    [([3, 1, 7], [5, 17, 9], 40, False), ([20], [40], 48, False), ([3, 1, 7], [5, 17, 9], 40, True)],
    ids=["ragged-cartridge", "whole-tiles", "warp-specialized"],
)
def test_prefill_cartridge_tma(
    q_lens: list[int], live_lens: list[int], cartridge_len: int, ws: bool, kernel_device: torch.device
) -> None:
    # The cartridge's full tiles through TMA descriptor boxes (a head's columns of the (T_c, H_kv * D) view) must
    # combine the same keys as the pointer gathers: a wrong column offset reads another head's cartridge, a box of
    # the wrong height another tile. A ragged cartridge keeps its last, partial tile on the masked pointer path.
    pr = random_problem(q_lens, live_lens, cartridge_len=cartridge_len, device=kernel_device)
    cfg = prefill_config(4, 64, block_m=16, block_n=16, num_warps=4, cartridge_tma=True, warp_specialize=ws)
    o = run_fused(pr, mode="prefill", config=cfg)
    assert_matches(o)
    identity = kernel_identity(o.attn)
    assert identity["config"]["cartridge_tma"] is True and "tma" in identity["specialization"]


def test_cartridge_tma_refuses_strided_heads(kernel_device: torch.device) -> None:
    # TMA boxes need the heads of a token next to each other: a cartridge whose heads are further apart is refused
    # with the field named, never read wrongly.
    pr = random_problem([3], [5], cartridge_len=32, device=kernel_device)
    wide = torch.zeros(32, 2, 2 * 64, dtype=pr.cartridge_k.dtype, device=kernel_device)
    wide[:, :, :64] = pr.cartridge_k
    pr = dataclasses.replace(pr, cartridge_k=wide[:, :, :64])
    cfg = prefill_config(4, 64, block_m=16, block_n=16, cartridge_tma=True)
    with pytest.raises(UnsupportedLayoutError, match="cartridge K head stride"):
        run_fused(pr, mode="prefill", config=cfg)


@pytest.mark.parametrize("splits", [2, 4])
def test_split_decode_reads_each_key_once_per_request(
    splits: int, kernel_mode: str, kernel_device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cartridge of 1.5 tiles puts split boundaries inside live tiles when ranges are counted in keys; then both
    # neighbours read the tile, which a GPU pays for in bytes even where masks keep the result exact.
    if kernel_mode != "interpreter":
        pytest.skip("counts the kernel's loads through the Triton interpreter")
    import numpy as np
    from triton.runtime import interpreter

    live = [1, 30, 8, 17, 200]
    pr = random_problem([1] * 5, live, num_qo_heads=8, num_kv_heads=2, cartridge_len=24, device=kernel_device)
    loaded: list[np.ndarray] = []
    real_load = interpreter.InterpreterBuilder.create_masked_load

    def counted_load(self, ptrs, mask, *rest):  # the tail differs across Triton versions
        loaded.append(np.unique(ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)]))
        return real_load(self, ptrs, mask, *rest)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_masked_load", counted_load)
    o = run_fused(pr, mode="decode", config=decode_config(4, 64, 5, 200, splits=splits, block_n=16))
    monkeypatch.undo()
    assert o.attn.plan_info.grid == (5 * splits, 2)  # the plan split as asked
    assert_matches(o)
    addresses, times = np.unique(np.concatenate(loaded), return_counts=True)

    def counts_in(*tensors: torch.Tensor) -> np.ndarray:
        inside = np.zeros_like(addresses, dtype=bool)
        for t in {id(t.untyped_storage()): t for t in tensors}.values():
            lo = t.untyped_storage().data_ptr()
            inside |= (addresses >= lo) & (addresses < lo + t.untyped_storage().nbytes())
        return times[inside]

    per_key = 2 * pr.live_k.shape[2] * pr.live_k.shape[3]  # K and V elements of one token over the KV heads
    live_counts = counts_in(pr.live_k, pr.live_v)
    assert len(live_counts) == sum(live) * per_key and set(live_counts.tolist()) == {1}, np.bincount(live_counts)
    cart_counts = counts_in(pr.cartridge_k, pr.cartridge_v)
    assert len(cart_counts) == 24 * per_key and set(cart_counts.tolist()) == {len(live)}, np.bincount(cart_counts)
