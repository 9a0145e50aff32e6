"""The dispatch table is what `plan` launches: every input of an envelope falls in exactly one region, whose
configuration is the one the heuristics choose for it; each region's edges are where the choice changes."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from cartridge_attn import CartridgeAttention, decode_config, default_prefill_impl, prefill_config, random_problem
from cartridge_attn import _kernel as K
from cartridge_attn import errors as ca_errors
from cartridge_attn import heuristics as H
from cartridge_attn.dispatch import Envelope, dispatch_table, prefill_regions, specialization_of
from cartridge_attn.gluon_host import gluon_problem

ENVELOPE = Envelope(
    max_batch=80, max_live=1100, max_query_tokens=700, num_kv_heads=(1, 8, 32), cartridge_lens=(632, 16)
)


@pytest.fixture(scope="module")
def table():
    return dispatch_table(ENVELOPE)


@pytest.mark.parametrize("group", [1, 3, 4, 7, 16])
@pytest.mark.parametrize("head_dim", K.SUPPORTED_HEAD_DIMS)
@pytest.mark.parametrize("num_kv_heads", ENVELOPE.num_kv_heads)
@pytest.mark.parametrize("t_c", ENVELOPE.cartridge_lens)
def test_every_decode_input_is_in_one_region_with_the_heuristics_config(
    table, group: int, head_dim: int, num_kv_heads: int, t_c: int
) -> None:
    regions = [r for r in table if r.mode == "decode" and (r.group, r.head_dim) == (group, head_dim)]
    # Around every length where a split count, a split's tile width or the wide tiles can change (from the
    # constants that set them, so that a changed threshold is probed where it now lies), and a coarse grid between.
    splits = [1 << k for k in range(1, K.DECODE_SPLIT_MAX.bit_length())]
    cuts = {K.DECODE_WIDE_MIN_LIVE, K.CASCADE_UNPACKED_MAX_LIVE + 1}
    cuts |= {K.DECODE_SPLIT_KEYS * k - t_c for k in splits} | {K.DECODE_SPLIT_NARROW_KEYS * k - t_c + 1 for k in splits}
    edges = {n + d for n in cuts for d in (-1, 0, 1)}
    lives = sorted({*range(1, ENVELOPE.max_live + 1, 37), *(n for n in edges if 1 <= n <= ENVELOPE.max_live)})
    for batch in range(1, ENVELOPE.max_batch + 1):
        for live in lives:
            hits = [r for r in regions if r.contains(batch=batch, max_live=live, num_kv_heads=num_kv_heads,
                                                     cartridge_len=t_c)]  # fmt: skip
            assert len(hits) == 1, (batch, live, hits)
            want = decode_config(group, head_dim, batch, live, num_kv_heads=num_kv_heads, cartridge_len=t_c)
            assert hits[0].config == want, (batch, live)


@pytest.fixture(scope="module")
def gluon_table():
    return dispatch_table(ENVELOPE, prefill_impl="gluon")


@pytest.mark.parametrize("impl", K.IMPLS)
@pytest.mark.parametrize("group", K.SUPPORTED_GROUPS)
@pytest.mark.parametrize("num_kv_heads", ENVELOPE.num_kv_heads)
def test_every_prefill_input_is_in_one_region_with_the_heuristics_config(
    table, gluon_table, impl: str, group: int, num_kv_heads: int
) -> None:
    regions = [r for r in (gluon_table if impl == "gluon" else table) if r.mode == "prefill" and r.group == group
               and r.head_dim == 128]  # fmt: skip
    for tokens in range(2, ENVELOPE.max_query_tokens + 1):
        rows = tokens * group
        hits = [r for r in regions if r.contains(query_rows=rows, num_kv_heads=num_kv_heads)]
        assert len(hits) == 1, (tokens, hits)
        assert hits[0].config == prefill_config(group, 128, rows=rows, num_kv_heads=num_kv_heads, impl=impl)


@pytest.mark.parametrize("impl", K.IMPLS)
@pytest.mark.parametrize("head_dim", K.SUPPORTED_HEAD_DIMS)
@pytest.mark.parametrize("num_kv_heads", ENVELOPE.num_kv_heads)
def test_the_prefill_regions_agree_with_the_heuristics_across_the_two_per_sm_cut(
    impl: str, head_dim: int, num_kv_heads: int
) -> None:
    # The envelope above stops at 700 tokens, short of the Gluon prefill's last cut: probe every row around it.
    cut = H.GLUON_TWO_PER_SM_MAX_ROWS
    for group in K.SUPPORTED_GROUPS:
        regions = prefill_regions(group, head_dim, num_kv_heads, (cut + 4 * group) // group + 1, impl)
        for rows in range(cut - 2 * group, cut + 2 * group + 1):
            hits = [r for r in regions if r.contains(query_rows=rows, num_kv_heads=num_kv_heads)]
            assert len(hits) == 1, (group, rows, hits)
            want = prefill_config(group, head_dim, rows=rows, num_kv_heads=num_kv_heads, impl=impl)
            assert hits[0].config == want, (group, rows)


@pytest.mark.parametrize("head_dim", K.SUPPORTED_HEAD_DIMS)
def test_the_gluon_prefill_is_persistent_only_for_its_128_row_tiles_past_the_two_per_sm_ones(head_dim: int) -> None:
    cut = H.GLUON_TWO_PER_SM_MAX_ROWS
    below, above = (prefill_config(4, head_dim, rows=r, num_kv_heads=8, impl="gluon") for r in (cut, cut + 1))
    assert not below.persistent
    assert above.persistent == (head_dim == H.GLUON_TWO_PER_SM_HEAD_DIM)
    if above.persistent:
        assert above.block_m == 128 and above.tag.endswith("glp")
        # The compiled variant a plan names carries the flag: a persistent launch is not the qualified one-per-item.
        plan = SimpleNamespace(config=above, mode="prefill", q_dtype=torch.bfloat16, cartridge_v_dtype=torch.bfloat16,
                               live_v_dtype=torch.bfloat16, num_qo_heads=32, num_kv_heads=8, head_dim=head_dim,
                               page_size=8, causal=True)  # fmt: skip
        spec = specialization_of(plan)
        assert spec.persistent and spec.config == above and spec.key.endswith("glp")
    # A caller's 64-row tile and the Triton prefill are never persistent, and only the Gluon prefill may be.
    assert not prefill_config(4, head_dim, rows=cut + 1, num_kv_heads=8, impl="gluon", block_m=64).persistent
    assert not prefill_config(4, head_dim, rows=cut + 1, num_kv_heads=8).persistent
    with pytest.raises(ValueError, match="persistent grid is a Gluon prefill option"):
        dataclasses.replace(prefill_config(4, head_dim, rows=cut + 1, num_kv_heads=8), persistent=True)
    with pytest.raises(ValueError, match="persistent grid is a Gluon prefill option"):
        prefill_config(4, head_dim, rows=cut + 1, num_kv_heads=8, persistent=True)


def test_the_persistent_gluon_tiles_take_a_third_stage_where_16_bit_live_values_leave_room() -> None:
    cut = H.GLUON_TWO_PER_SM_MAX_ROWS
    b16, b8 = (prefill_config(4, 128, rows=cut + 1, num_kv_heads=8, impl="gluon", live_v_bits=b) for b in (16, 8))
    assert (b16.num_stages, b8.num_stages) == (3, 2) and b16.block_n == b8.block_n == 128
    assert H.gluon_shared_bytes(b16, 128, 16) <= H.SM90_SHARED_BYTES < H.gluon_shared_bytes(b16, 128, 8)
    # Not below the cut, never over a caller's depth, and not for a caller's other persistent tiles (two 64 x 64
    # programs share an SM only over 2 stages).
    assert prefill_config(4, 128, rows=cut, num_kv_heads=8, impl="gluon").num_stages == 2
    assert prefill_config(4, 128, rows=cut + 1, num_kv_heads=8, impl="gluon", num_stages=2).num_stages == 2
    for bm, bn in ((64, 64), (128, 64)):
        tile = prefill_config(4, 128, rows=cut + 1, num_kv_heads=8, impl="gluon", block_m=bm, block_n=bn,
                              persistent=True)  # fmt: skip
        assert tile.num_stages == 2, (bm, bn)
    # The table follows the live values' width: an FP8 launch is not the 16-bit one's variant.
    for bits, stages in ((16, 3), (8, 2)):
        regions = prefill_regions(4, 128, 8, (cut + 8) // 4, "gluon", bits)
        assert {r.config.num_stages for r in regions if r.config.persistent} == {stages}


def test_the_gluon_table_differs_from_the_triton_one_only_in_prefill(table, gluon_table) -> None:
    assert [r for r in table if r.mode == "decode"] == [r for r in gluon_table if r.mode == "decode"]
    assert {r.config.impl for r in gluon_table if r.mode == "prefill"} == {"gluon"}
    assert {r.config.impl for r in table if r.mode == "prefill"} == {"triton"}


@pytest.mark.parametrize(
    ("capability", "problem", "want"),
    [
        ((9, 0), None, "gluon"),
        ((9, 0), "the Gluon prefill is written for Triton 3.6.x's Gluon; this is Triton 3.9.0", "triton"),
        ((10, 0), None, "triton"),
        ((8, 9), None, "triton"),
        (None, None, "triton"),  # no CUDA device, or the interpreter
    ],
)
def test_the_default_prefill_is_gluon_only_where_it_runs(capability, problem, want: str) -> None:
    assert K.default_prefill_impl(capability, problem) == want


def test_a_wrapper_without_prefill_impl_plans_the_devices_default(kernel_device: torch.device) -> None:
    pr = random_problem([5, 9], [7, 12], device=kernel_device)
    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), **pr.plan_kwargs())
    # Said independently of default_prefill_impl: the Gluon prefill exactly on SM90 with Triton 3.6, compiled.
    sm90 = kernel_device.type == "cuda" and torch.cuda.get_device_capability(kernel_device) == (9, 0)
    want = "gluon" if sm90 and not K.INTERPRETED and gluon_problem() is None else "triton"
    assert attn.plan_info.config.impl == want == default_prefill_impl(kernel_device)
    assert default_prefill_impl(str(kernel_device)) == want  # a device name is taken too
    if kernel_device.type == "cpu":
        with pytest.raises(ca_errors.UnsupportedLayoutError, match="gluon"):
            CartridgeAttention(prefill_impl="gluon").plan(*pr.page_table(), **pr.plan_kwargs())
    for impl in K.IMPLS:
        if impl == "triton" or (kernel_device.type == "cuda" and default_prefill_impl(kernel_device) == "gluon"):
            named = CartridgeAttention(prefill_impl=impl)
            named.plan(*pr.page_table(), **pr.plan_kwargs())
            assert named.plan_info.config.impl == impl
    with pytest.raises(ca_errors.UnsupportedLayoutError, match="prefill_impl"):
        CartridgeAttention(prefill_impl="cutlass")


def test_decode_regions_switch_where_the_heuristics_do(table) -> None:
    key = (4, 128, 8, 632)  # group, head_dim, KV heads, cartridge length
    g4 = sorted((r.batch, r.max_live, r.config.reqs_per_program, r.config.splits, r.config.block_n,
                 r.config.cart_rows) for r in table
                if r.mode == "decode" and (r.group, r.head_dim, r.num_kv_heads, r.cartridge_len) == key)  # fmt: skip
    # 8 KV heads and a 632-position cartridge: a grid of batch x 8 programs fills the 132 SMs from batch 17 on;
    # below, each request splits into ranges of >= 32 keys, a power of two of them, enough to fill the SMs. From
    # batch 16 on a cascade takes the cartridge (up to 512 live tokens while requests are not packed), and its live
    # walk beside it does not split a grid that fills half the SMs.
    assert g4 == [
        ((1, 1), (1, 392), 1, 16, 64, 0),  # 633-1024 keys in 16 ranges fit one 64-key tile each
        ((1, 1), (393, 1100), 1, 16, 128, 0),  # 1025 keys and more: 128-key tiles
        ((2, 2), (1, 1100), 1, 8, 128, 0),  # 16 programs: 8 splits fill the SMs (9 would)
        ((3, 5), (1, 1100), 1, 4, 128, 0),  # 24-40 programs: 4 splits fill the SMs (3-5 times as many)
        ((6, 15), (1, 1100), 1, 2, 128, 0),
        ((16, 16), (513, 1100), 1, 2, 128, 0),
        ((16, 31), (1, 512), 1, 1, 128, K.CASCADE_DEFAULT_ROWS),
        ((17, 31), (513, 1100), 1, 1, 128, 0),
        ((32, 80), (1, 1100), 2, 1, 128, K.CASCADE_DEFAULT_ROWS),  # packing two requests per program from 32 on
    ]
    # Without the shape (the API planned with no head count), nothing splits and tiny grids keep wide tiles.
    assert decode_config(4, 128, 2, 600).block_n == 256 and decode_config(4, 128, 2, 600).splits == 1
    packed = next(r for r in table if r.mode == "decode" and r.group == 4 and r.config.reqs_per_program == 2)
    assert {"batch": 32, "max_live": 1} in packed.edge_inputs()  # the batch where packing starts is an edge
    assert {"batch": 80, "max_live": 1100} in packed.edge_inputs()  # and the envelope's maximum
    g16 = {r.config.reqs_per_program for r in table if r.mode == "decode" and r.group == 16}
    assert g16 == {1}  # 16 query heads fill a 16-row tile alone: no packing
    # Groups that are no power of two pack too while two of them fit one 16-row tile, never more rows than that.
    for group in (3, 5, 6, 7, 9, 12):
        regions = [r for r in table if r.mode == "decode" and r.group == group]
        assert {r.config.reqs_per_program for r in regions} == ({1, 2} if 2 * group <= 16 else {1}), group
        assert all(r.config.reqs_per_program * group <= r.config.block_m == 16 for r in regions), group


def test_an_envelope_outside_the_kernel_is_refused() -> None:
    with pytest.raises(ValueError, match="outside the kernel's support"):
        Envelope(groups=(17,))
    with pytest.raises(ValueError, match="max_batch must be at least 1"):
        Envelope(max_batch=0)


def test_a_plans_specialization_names_its_compiled_variant(kernel_device: torch.device) -> None:
    pr = random_problem([1] * 33, [5] * 33, num_qo_heads=8, num_kv_heads=2, cartridge_len=16, device=kernel_device)
    attn = CartridgeAttention()
    plan = attn.plan(*pr.page_table(), device=pr.q.device, **pr.plan_kwargs())
    spec = specialization_of(plan)
    cfg = decode_config(4, 64, 33, 5, num_kv_heads=2, cartridge_len=16)
    assert (spec.mode, spec.group, spec.head_dim, spec.reqs_per_program) == ("decode", 4, 64, 2)
    assert spec.key.startswith("decode/bfloat16/g4/d64/p")
    assert spec.key.endswith(f"m{cfg.block_m}n{cfg.block_n}r2w{cfg.num_warps}s{cfg.num_stages}c64x1p")
    assert spec.config == cfg


def test_warp_specialization_is_named_and_needs_what_triton_specializes() -> None:
    cfg = prefill_config(4, 128, warp_specialize=True)
    assert cfg.warp_specialize and cfg.tag.endswith("ws") and not prefill_config(4, 128).tag.endswith("ws")
    # Triton 3.6 specializes 4-warp kernels only; any other launch would compile unspecialized under this name.
    with pytest.raises(ValueError, match="warp_specialize needs 4 warps"):
        prefill_config(4, 128, warp_specialize=True, num_warps=8)
    with pytest.raises(ValueError, match="one request per program and no split"):
        dataclasses.replace(decode_config(4, 128, 1, 1000), warp_specialize=True)


@pytest.mark.parametrize("group", [3, 4, 16])
@pytest.mark.parametrize("t_c", [632, 640])
def test_cascade_regions_hold_what_a_cascading_wrapper_plans(group: int, t_c: int) -> None:
    # `CartridgeAttention(decode_cascade=True)`: every decode is a cascade whose live walk splits by live keys alone,
    # so its regions cut where those splits change, not where the cartridge's keys would move them.
    from cartridge_attn.dispatch import decode_regions

    regions = decode_regions(group, 128, 80, 1100, 8, t_c, cascade=True)
    assert all(r.config.cart_rows == K.CASCADE_DEFAULT_ROWS for r in regions)
    assert {r.config.cart_splits for r in regions} == {-(-t_c // K.CASCADE_RANGE_KEYS)}
    for batch in range(1, 81):
        for live in sorted(
            {
                *range(1, 1101, 41),
                *(k * K.DECODE_SPLIT_KEYS + d for k in (2, 4, 8, 16) for d in (-1, 0)),
                *(k * K.DECODE_SPLIT_NARROW_KEYS + d for k in (2, 4, 8, 16) for d in (0, 1)),
            }
        ):
            hits = [r for r in regions if r.contains(batch=batch, max_live=live, num_kv_heads=8, cartridge_len=t_c)]
            assert len(hits) == 1, (batch, live, hits)
            want = decode_config(group, 128, batch, live, num_kv_heads=8, cartridge_len=t_c,
                                 cart_rows=K.cascade_rows(True))  # fmt: skip
            assert hits[0].config == want, (batch, live)
    # The default table's cascades are exactly where `cascade_by_default` says, the live walk a dependent launch.
    for r in decode_regions(group, 128, 80, 1100, 8, t_c):
        corners = [(b, n) for b in r.batch for n in r.max_live]
        assert {bool(r.config.cart_rows)} == {K.cascade_by_default(b, n) for b, n in corners}, r
        assert r.config.cart_pdl == bool(r.config.cart_rows)
