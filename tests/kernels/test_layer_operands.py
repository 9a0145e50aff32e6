"""The serving hot path: a layer's operands checked once (`check_layer`, `check_live_pages`), then launched per
step with only what a new plan can change checked (`run_layer`, `LivePages.write`).

Each case draws a fresh problem; outputs are poisoned first. The once-checked path must match the fp32 reference
(attention) or the cache PyTorch indexing computes (writes), give the same bytes as the fully checked `run` /
`write_live_kv`, and still refuse what a later step can get wrong.
"""

from __future__ import annotations

import pytest
import torch
from _cartridge_attn_check import ATOL, REL_L2_MAX, RTOL
from _serving_kernels import randint, seeded_generator
from cartridge_attn import (
    CartridgeAttention,
    UnsupportedLayoutError,
    check_live_pages,
    random_problem,
    reference_attention,
)
from cartridge_attn.cache_write import write_live_kv
from test_cache_write import Cache, expected_cache, qkv_views, slot_mapping

BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn


def _problem(gen: torch.Generator, device: torch.device, **kw):
    batch = randint(gen, 1, 4)
    q_lens = kw.pop("q_lens", [randint(gen, 1, 5) for _ in range(batch)])
    live = [q + randint(gen, 0, 12) for q in q_lens]
    return random_problem(q_lens, live, cartridge_len=16, device=device, seed=randint(gen, 0, 2**31 - 1), **kw)


def _scales(pr) -> dict:
    return {"cartridge_v_scale": pr.cartridge_v_scale, "live_v_scale": pr.live_v_scale}


@pytest.mark.parametrize("live_v", [BF16, FP8], ids=["lv16", "lv8"])
def test_run_layer_gives_run_s_bytes_over_several_plans(live_v: torch.dtype, kernel_device: torch.device, request):
    gen = seeded_generator(request.node.nodeid)
    pr = _problem(gen, kernel_device, live_v_dtype=live_v)
    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), **pr.plan_kwargs())
    layer = attn.check_layer(pr.cartridge_k, pr.cartridge_v, pr.paged_kv, q=pr.q, out=pr.q, **_scales(pr))
    want = attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, **_scales(pr))
    got = torch.full_like(want, float("nan"))
    attn.run_layer(pr.q, layer, got)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    ref = reference_attention(pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(),
                              causal=True, **_scales(pr))  # fmt: skip
    assert not torch.isnan(got).any()
    torch.testing.assert_close(got.float(), ref, rtol=RTOL, atol=ATOL)
    assert float((got.float() - ref).norm() / ref.norm()) < REL_L2_MAX
    # A later step's plan (other lengths, same engine shapes) reuses the same operands on the same pages.
    fewer = [max(1, n // 2) for n in pr.kv_last_page_len.tolist()]
    pr2 = random_problem([1] * len(fewer), fewer, cartridge_len=16, device=kernel_device, live_v_dtype=live_v)
    later = CartridgeAttention()
    plan = later.plan(*pr2.page_table(), **pr2.plan_kwargs())
    assert plan.operand_signature == layer.signature
    q2 = torch.randn(plan.total_q, *pr.q.shape[1:], generator=gen).to(BF16).to(kernel_device)
    want2 = later.run(q2, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, **_scales(pr))
    got2 = torch.full_like(want2, float("nan"))
    later.run_layer(q2, layer, got2)
    assert torch.equal(got2.view(torch.int16), want2.view(torch.int16))


def test_run_layer_refuses_what_a_new_plan_can_get_wrong(kernel_device: torch.device, request) -> None:
    gen = seeded_generator(request.node.nodeid)
    pr = _problem(gen, kernel_device)
    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), **pr.plan_kwargs())
    few_pages = (pr.live_k[:1], pr.live_v[:1])
    layer = attn.check_layer(pr.cartridge_k, pr.cartridge_v, few_pages, **_scales(pr))
    out = torch.empty_like(pr.q)
    with pytest.raises(UnsupportedLayoutError, match="kv_indices: expected page numbers < num_pages = 1"):
        attn.run_layer(pr.q, layer, out)
    layer = attn.check_layer(pr.cartridge_k, pr.cartridge_v, pr.paged_kv, **_scales(pr))
    with pytest.raises(UnsupportedLayoutError, match="q / out rows"):
        attn.run_layer(pr.q[1:], layer, out[1:])


# Each fact of a plan that the operands' checks depend on: a plan that differs in any one of them is refused.
SIGNATURE_CHANGES = {
    "num_qo_heads": 16,
    "num_kv_heads": 1,
    "head_dim": 128,
    "page_size": 16,
    "cartridge_len": 32,
    "cartridge_v_dtype": BF16,
    "live_v_dtype": FP8,
}


@pytest.mark.parametrize("field", sorted(SIGNATURE_CHANGES))
def test_operands_serve_only_plans_of_the_shapes_they_were_checked_for(field: str, kernel_device, request) -> None:
    gen = seeded_generator(request.node.nodeid)
    pr = _problem(gen, kernel_device, q_lens=[1] * randint(gen, 1, 4))
    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), **pr.plan_kwargs())
    layer = attn.check_layer(pr.cartridge_k, pr.cartridge_v, pr.paged_kv, **_scales(pr))
    other = CartridgeAttention()
    plan = other.plan(*pr.page_table(), **{**pr.plan_kwargs(), field: SIGNATURE_CHANGES[field]})
    assert plan.operand_signature != layer.signature
    with pytest.raises(UnsupportedLayoutError, match="layer operands: expected checked for"):
        other.run_layer(pr.q, layer, torch.empty_like(pr.q))


def test_check_layer_checks_the_engine_buffers_layout(kernel_device: torch.device, request) -> None:
    gen = seeded_generator(request.node.nodeid)
    pr = _problem(gen, kernel_device)
    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), **pr.plan_kwargs())
    with pytest.raises(UnsupportedLayoutError, match="q dtype"):
        attn.check_layer(pr.cartridge_k, pr.cartridge_v, pr.paged_kv, q=pr.q.float(), **_scales(pr))
    with pytest.raises(UnsupportedLayoutError, match="out shape"):
        attn.check_layer(pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=pr.q[:, :1], **_scales(pr))
    with pytest.raises(UnsupportedLayoutError, match="cartridge V dtype"):
        attn.check_layer(pr.cartridge_k, pr.cartridge_v.to(BF16), pr.paged_kv, **_scales(pr))


@pytest.mark.parametrize("v_dtype", [BF16, FP8], ids=["v-bf16", "v-fp8"])
def test_checked_pages_write_write_live_kv_s_bytes(v_dtype: torch.dtype, kernel_device: torch.device, request):
    gen = seeded_generator(request.node.nodeid)
    heads, block, blocks = randint(gen, 1, 4), 8, randint(gen, 3, 6)
    v_scale = (2.0 ** torch.randint(-2, 3, (heads,), generator=gen).float()).to(kernel_device)
    v_scale = v_scale if v_dtype == FP8 else None
    caches = [Cache(blocks, block, heads, v_dtype, kernel_device) for _ in range(2)]
    key, value = qkv_views(gen, 24, heads, kernel_device)
    if v_scale is not None:
        # Values FP8 holds exactly after the power-of-two scale: the interpreter's float -> FP8 rounding is wrong for
        # some inputs (test_cache_write says which), and exact values need no rounding.
        exact = torch.randn(value.shape, generator=gen).to(FP8).float() * v_scale.cpu()[None, :, None]
        value = exact.to(BF16).to(kernel_device)
    pages = check_live_pages(key, value, *caches[1].pages(), torch.zeros(1, dtype=torch.int64), v_scale)
    for step in range(2):  # two steps, other slots and row counts, through the same checked pages
        n = randint(gen, 3, 20)
        slots = slot_mapping(gen, n, blocks * block, 1, torch.int64, kernel_device)
        scale = None if v_scale is None else v_scale.cpu()
        want = expected_cache(caches[1], key.cpu(), value.cpu(), slots.cpu(), scale)
        assert not torch.equal(want.view(torch.uint8), caches[1].raw.cpu().view(torch.uint8)), "nothing to write"
        write_live_kv(key, value, *caches[0].pages(), slots, v_scale)
        pages.write(key, value, slots)
        assert torch.equal(caches[1].raw.cpu().view(torch.uint8), want.view(torch.uint8)), f"step {step}"
        assert torch.equal(caches[0].raw.cpu().view(torch.uint8), want.view(torch.uint8)), f"step {step}"
    with pytest.raises(UnsupportedLayoutError, match=r"key: expected >= 5 rows"):
        pages.write(key[:2], value[:2], slot_mapping(gen, 5, blocks * block, 0, torch.int64, kernel_device))
    with pytest.raises(UnsupportedLayoutError, match="key/value dtype"):
        check_live_pages(key.float(), value.float(), *caches[1].pages(), torch.zeros(1, dtype=torch.int64), v_scale)
