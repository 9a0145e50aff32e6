"""The Gluon prefill (`cartridge_attn._gluon_prefill`) on an SM90 GPU against the fp32 reference.

Fresh random inputs, a NaN-poisoned output (_cartridge_attn_check.run_fused) and, where it matters, NaN in every
cache slot no request owns: the kernel loads whole pages with TMA, so the slots past a request's end reach shared
memory and must be zeroed there, not multiplied by P = 0.
"""

from __future__ import annotations

import random

import pytest
import torch
from _cartridge_attn_check import assert_matches, run_fused
from _serving_kernels import poison_unused_slots
from cartridge_attn import CartridgeAttention, kernel_identity, prefill_config, random_problem, reference_attention
from cartridge_attn.gluon_host import device_sms, gluon_problem, programs_per_sm

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
V8, BF16, FP16 = torch.float8_e4m3fn, torch.bfloat16, torch.float16


@pytest.fixture(autouse=True)
def _sm90_with_gluon() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"the Gluon prefill is written for SM90; this GPU is {torch.cuda.get_device_capability()}")
    if (problem := gluon_problem()) is not None:
        pytest.skip(problem)


def _qwen(page_size: int = 8, head_dim: int = 128, cartridge_len: int = 632, group: int = 4) -> dict:
    return {"num_qo_heads": 8 * group, "num_kv_heads": 8, "head_dim": head_dim, "page_size": page_size,
            "cartridge_len": cartridge_len}  # fmt: skip


@pytest.mark.parametrize("block_m", [128, 64])
@pytest.mark.parametrize("page_size", [8, 16])
@pytest.mark.parametrize(
    ("cart_v", "live_v"),
    [(V8, BF16), (V8, V8), (BF16, BF16), (BF16, V8)],
    ids=["k16v8", "k16v8-live8", "k16v16", "k16v16-live8"],
)
def test_matches_reference_with_poisoned_free_slots(
    block_m: int, page_size: int, cart_v: torch.dtype, live_v: torch.dtype
) -> None:
    # Ragged ends everywhere: a cartridge that is not a multiple of 128, suffixes ending mid-page and mid-tile,
    # one request of one query, one whose queries span several 128-row tiles.
    cart = 632 if page_size == 8 else 640
    pr = random_problem([1, 17, 130, 64], [40, 17, 203, 64], cartridge_v_dtype=cart_v, live_v_dtype=live_v,
                        device=CUDA, **_qwen(page_size, cartridge_len=cart))  # fmt: skip
    poison_unused_slots(pr)
    cfg = prefill_config(4, 128, block_m=block_m, impl="gluon")
    o = run_fused(pr, config=cfg)
    assert o.attn.plan_info.config.impl == "gluon"
    assert_matches(o)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
@pytest.mark.parametrize(("head_dim", "group"), [(128, 4), (64, 4), (128, 3), (64, 5), (128, 1), (128, 16)])
def test_shapes_and_groups(head_dim: int, group: int, causal: bool) -> None:
    pr = random_problem([33, 1, 70], [33, 9, 150], device=CUDA, **_qwen(head_dim=head_dim, group=group))
    poison_unused_slots(pr)
    assert_matches(run_fused(pr, config=prefill_config(group, head_dim, impl="gluon"), causal=causal))


def test_fp16_queries_fp8_live_values_and_the_combined_layout() -> None:
    pr = random_problem([3, 40], [50, 40], dtype=FP16, cartridge_v_dtype=FP16, live_v_dtype=V8, device=CUDA, **_qwen())
    poison_unused_slots(pr)
    # 16-bit cartridge values beside FP8 live ones: the FP8 ring and one 16-bit ring (cartridge tiles and the FP8
    # tiles' staging take turns in it) fit 128-key tiles.
    cfg = prefill_config(4, 128, impl="gluon", live_v_bits=8)
    assert cfg.block_n == 128
    assert_matches(run_fused(pr, config=cfg))
    pr = random_problem([3, 40], [17, 40], combined=True, device=CUDA, **_qwen(page_size=16, cartridge_len=640))
    poison_unused_slots(pr)
    assert_matches(run_fused(pr, config=prefill_config(4, 128, impl="gluon")))


def test_long_suffixes_repeat_bitwise_and_agree_with_the_triton_kernel() -> None:
    pr = random_problem([512] * 4, [512] * 4, device=CUDA, **_qwen())
    first = run_fused(pr, config=prefill_config(4, 128, impl="gluon"))
    again = run_fused(pr, config=prefill_config(4, 128, impl="gluon"))
    triton = run_fused(pr, config=prefill_config(4, 128))
    assert_matches(first)
    assert torch.equal(first.out, again.out), "two launches on the same inputs differ: a race between partitions"
    assert triton.attn.plan_info.config.impl == "triton"
    torch.testing.assert_close(first.out.float(), triton.out.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(("block_m", "block_n"), [(128, 128), (64, 64)], ids=["m128", "m64-n64"])
def test_persistent_programs_walk_many_work_items_of_every_length(block_m: int, block_n: int) -> None:
    # Many more work items (tile, KV head) than the programs the GPU holds, of random lengths: each program walks
    # several, its rings' stages and barrier phases running on from one item to the next whatever their tile counts.
    # An item skipped leaves NaN rows, one walked with another's lengths or a phase off by one gives wrong rows, a
    # hang or launches that differ.
    q_lens = [random.randint(1, 300) for _ in range(40)]
    live = [q + random.randint(0, 200) for q in q_lens]
    pr = random_problem(q_lens, live, device=CUDA, **_qwen())
    poison_unused_slots(pr)
    cfg = prefill_config(4, 128, block_m=block_m, block_n=block_n, impl="gluon", persistent=True)
    items = sum(-(-q * 4 // block_m) for q in q_lens) * 8
    held = device_sms(CUDA) * programs_per_sm(cfg, 128, 16)
    assert items > 4 * held
    runs = [run_fused(pr, config=cfg) for _ in range(2)]
    assert_matches(runs[0])
    assert torch.equal(runs[0].out, runs[1].out), "two launches on the same inputs differ"


@pytest.mark.parametrize("live_v", [BF16, V8], ids=["live16", "live8"])
def test_every_staging_path_repeats_bitwise(live_v: torch.dtype) -> None:
    # The stager converts FP8 tiles and zeroes a ragged live tile's tail in place, between a stage's "ready" and
    # "staged" barriers: a missing wait or fence there is a race, which shows as launches that differ. Suffixes end
    # mid-tile and mid-page, with NaN in every free slot.
    pr = random_problem([200, 77, 129], [261, 77, 300], live_v_dtype=live_v, device=CUDA, **_qwen())
    poison_unused_slots(pr)
    cfg = prefill_config(4, 128, impl="gluon", live_v_bits=live_v.itemsize * 8)
    runs = [run_fused(pr, config=cfg) for _ in range(3)]
    assert_matches(runs[0])
    for again in runs[1:]:
        assert torch.equal(runs[0].out, again.out), "two launches on the same inputs differ: a race in the staging"


def test_kept_operands_expand_the_cartridge_once_and_follow_in_place_writes() -> None:
    # Serving keeps each layer's operands across steps and may plan with a new wrapper every step: the FP8
    # cartridge's FP16 expansion lives with the operands, made at their first Gluon launch and kept (one set of
    # descriptors over it), and a later in-place write to the cartridge is read.
    pr = random_problem([40, 7], [90, 30], device=CUDA, **_qwen())
    layer = None
    outs = []
    for step in range(3):
        attn = CartridgeAttention(prefill_impl="gluon")
        attn.plan(*pr.page_table(), device=CUDA, **pr.plan_kwargs())
        if layer is None:
            layer = attn.check_layer(pr.cartridge_k, pr.cartridge_v, pr.paged_kv, q=pr.q, **pr.run_kwargs())
        if step == 2:
            pr.cartridge_v[1:300].copy_(torch.randn(299, 8, 128, device=CUDA).to(V8))
        out = torch.full_like(pr.q, float("nan"))
        attn.run_layer(pr.q, layer, out)
        torch.cuda.synchronize()
        ref = reference_attention(pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(),
                                  causal=True, **pr.run_kwargs())  # fmt: skip
        torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=3e-2)
        outs.append(out)
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[1], outs[2])
    assert len(layer.descriptors) == 1


def test_wrapper_default_and_identity() -> None:
    pr = random_problem([130, 7], [200, 7], device=CUDA, **_qwen())
    attn = CartridgeAttention(prefill_impl="gluon")
    plan = attn.plan(*pr.page_table(), device=CUDA, **pr.plan_kwargs())
    assert plan.config.impl == "gluon" and plan.config.tag.endswith("gl")
    out = torch.full_like(pr.q, float("nan"))
    attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())
    torch.cuda.synchronize()
    assert not torch.isnan(out).any()
    ident = kernel_identity(attn)
    assert ident["kernel"] == "cartridge_prefill_ws_kernel" and ident["source_file"] == "_gluon_prefill.py"
    # No partition spills: the producer and stager's warpgroup has the registers the consumers leave (56 or 40).
    assert ident["config"]["impl"] == "gluon" and ident["spills"] == 0 and ident["shared_bytes"] > 0


@pytest.mark.parametrize("live_v", [BF16, V8], ids=["live16", "live8"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_serving_plugins_interleaved_pages(live_v: torch.dtype, head_dim: int) -> None:
    # K then V in one row per token and head (vLLM's cache as the plugin keeps it): the producer reads K and V at
    # their own head columns (1.5 D and 3 D bytes apart with FP8 values), checked against the Triton prefill too.
    pr = random_problem([3, 40, 130], [17, 40, 200], live_v_dtype=live_v, interleaved=True, device=CUDA,
                        **_qwen(head_dim=head_dim, page_size=16, cartridge_len=640))  # fmt: skip
    assert pr.live_k.stride(2) != pr.live_v.stride(2) or live_v == BF16
    poison_unused_slots(pr)
    cfg = prefill_config(4, head_dim, impl="gluon", live_v_bits=live_v.itemsize * 8)
    gluon = run_fused(pr, config=cfg)
    assert_matches(gluon)
    triton = run_fused(pr, config=prefill_config(4, head_dim))
    torch.testing.assert_close(gluon.out.float(), triton.out.float(), rtol=2e-2, atol=2e-2)


def test_direct_launches_are_bitwise_the_jit_launch_and_skip_its_binding() -> None:
    # A layer's operands checked with direct_launch: the second Gluon launch goes through the compiled launcher
    # (TMA descriptors re-encoded by it), bit-equal to the JIT path; another query stride is another variant.
    pr = random_problem([40, 7], [90, 30], device=CUDA, **_qwen())
    attn = CartridgeAttention(prefill_impl="gluon")
    attn.plan(*pr.page_table(), device=CUDA, **pr.plan_kwargs())
    layer = attn.check_layer(pr.cartridge_k, pr.cartridge_v, pr.paged_kv, direct_launch=True, **pr.run_kwargs())
    want = attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, **pr.run_kwargs())
    for _ in range(2):
        got = torch.full_like(want, float("nan"))
        attn.run_layer(pr.q, layer, got)
        torch.cuda.synchronize()
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    assert layer.gluon_launches is not None and layer.gluon_launches.direct_launches == 1
    wide = torch.zeros(*pr.q.shape[:2], 2 * pr.q.shape[2], dtype=pr.q.dtype, device=CUDA)[..., : pr.q.shape[2]]
    wide.copy_(pr.q)
    got = torch.full_like(want, float("nan"))
    attn.run_layer(wide, layer, got)
    torch.cuda.synchronize()
    assert layer.gluon_launches.direct_launches == 1  # compiled through the JIT path, not launched as the old variant
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
