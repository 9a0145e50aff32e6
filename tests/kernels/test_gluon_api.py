"""The Gluon prefill's place in the API on a CPU host: who may ask for it, what a plan refuses, and what the
numerics gate and the reports name. Its compiled form is tested by tests/gluon (offline SM90 builds) and
test_gluon_prefill_gpu.py (an SM90 GPU)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
import torch
from cartridge_attn import (
    CartridgeAttention,
    UnsupportedLayoutError,
    _kernel,
    gluon_host,
    prefill_config,
    random_problem,
)
from cartridge_attn import heuristics as H
from cartridge_attn.identity import source_path, source_sha256

from qualify.kinds.kernel_numerics.params import lint
from qualify.numerics.cell import KernelNumericsParams
from qualify.numerics.dispatch_view import describe_cell
from qualify.numerics.fused import kernel_inputs

QWEN = {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128, "page_size": 8, "cartridge_len": 632}


def test_a_wrapper_names_its_prefill_and_nothing_else() -> None:
    assert CartridgeAttention().prefill_impl is None  # the dispatch's, per device (default_prefill_impl)
    assert CartridgeAttention(prefill_impl="gluon").prefill_impl == "gluon"
    with pytest.raises(UnsupportedLayoutError, match="prefill_impl"):
        CartridgeAttention(prefill_impl="cutlass")


def test_configurations_say_what_they_are() -> None:
    cfg = prefill_config(4, 128, impl="gluon")
    assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages, cfg.impl) == (128, 128, 4, 2, "gluon")
    assert cfg.tag == "m128n128r1w4s2gl" and not prefill_config(4, 128).tag.endswith("gl")
    assert prefill_config(4, 64, impl="gluon").num_stages == 3

    # Small grids take one consumer warpgroup over 128 keys, as the Triton prefill takes 64-row tiles, but only below
    # half the SMs (the Triton prefill drops to 64 rows below all of them).
    def tile(tokens: int, head_dim: int = 128, **kw: object) -> tuple[int, int, int]:
        c = prefill_config(4, head_dim, rows=tokens * 4, num_kv_heads=8, impl="gluon", **kw)
        return c.block_m, c.block_n, c.num_stages

    assert tile(64) == tile(287) == (64, 128, 2)
    assert prefill_config(4, 128, rows=512 * 4, num_kv_heads=8).block_m == 64
    # Above that, up to 16,384 rows, 64 x 64 tiles over 2 stages that two programs share an SM with; then 128 x 128
    # on a persistent grid, over 3 stages where 16-bit live values leave room.
    assert tile(288) == tile(512) == tile(4096) == (64, 64, 2)
    assert tile(4097) == tile(65536) == (128, 128, 3)
    assert tile(4097, live_v_bits=8) == (128, 128, 2)
    assert tile(288, live_v_bits=8) == (64, 64, 2)
    # Two of them fit an SM's shared memory, FP8 live V included.
    two = prefill_config(4, 128, rows=288 * 4, num_kv_heads=8, impl="gluon")
    for bits in (8, 16):
        assert 2 * (H.gluon_shared_bytes(two, 128, bits) + H.SM90_SHARED_BYTES_RESERVED) <= H.SM90_SHARED_BYTES_PER_SM
    # Only at head_dim 128, where it was measured; a caller's 2 stages keep the tile, a deeper ring keeps 128 keys.
    assert tile(512, head_dim=64) == (128, 128, 3)
    assert tile(512, num_stages=2) == (64, 64, 2)
    assert tile(512, num_stages=3) == (64, 128, 3)
    for bad in ({"num_warps": 8}, {"block_n": 32}, {"num_stages": 1}, {"splits": 2}, {"cartridge_tma": True}):
        with pytest.raises(ValueError, match="gluon prefill"):
            dataclasses.replace(cfg, **bad)
    with pytest.raises(ValueError, match="impl must be one of"):
        dataclasses.replace(cfg, impl="cuda")


def test_plan_refuses_decode_an_oversized_ring_and_a_host_without_sm90(kernel_device: torch.device) -> None:
    pr = random_problem([1, 1], [9, 30], device=kernel_device, **QWEN)
    with pytest.raises(UnsupportedLayoutError, match="prefill only"):
        CartridgeAttention().plan(*pr.page_table(), mode="decode", config=prefill_config(4, 128, impl="gluon"),
                                  device=kernel_device, **pr.plan_kwargs())  # fmt: skip
    pr = random_problem([5, 3], [9, 30], cartridge_v_dtype=torch.bfloat16, live_v_dtype=torch.float8_e4m3fn,
                        device=kernel_device, **QWEN)  # fmt: skip
    big = prefill_config(4, 128, block_n=128, num_stages=3, impl="gluon", live_v_bits=8)
    with pytest.raises(UnsupportedLayoutError, match=r"shared memory.*fewer stages or block_n 64"):
        CartridgeAttention().plan(*pr.page_table(), config=big, device=kernel_device, **pr.plan_kwargs())
    # The default for these dtypes fits: an SM90 host with Triton 3.6 plans it, any other refuses.
    gluon = CartridgeAttention(prefill_impl="gluon")
    if _runs_gluon(kernel_device):
        assert gluon.plan(*pr.page_table(), device=kernel_device, **pr.plan_kwargs()).config.impl == "gluon"
    else:
        with pytest.raises(UnsupportedLayoutError, match=r"Gluon has no interpreter|Triton 3\.6"):
            gluon.plan(*pr.page_table(), device=kernel_device, **pr.plan_kwargs())


def _runs_gluon(device: torch.device) -> bool:
    return (
        device.type == "cuda" and not _kernel.INTERPRETED and gluon_host.gluon_problem() is None
        and torch.cuda.get_device_capability(device) >= (9, 0)
    )  # fmt: skip


def test_the_numerics_gate_qualifies_what_the_cell_names() -> None:
    cell = {"phase": "prefill", "cartridge": {"id": "c632", "length": 632},
            "batch": {"id": "b", "q_lens": [512, 512], "live_lens": [512, 512]}}  # fmt: skip
    gluon = KernelNumericsParams.model_validate({**cell, "prefill_impl": "gluon"})
    assert "m64n64r1w4s2gl" in describe_cell(gluon) and "gl " not in describe_cell(
        KernelNumericsParams.model_validate(cell)
    )
    assert lint(gluon, None) == []
    decode = KernelNumericsParams.model_validate({**cell, "phase": "decode", "prefill_impl": "gluon"})
    assert [i.field for i in lint(decode, None)] == [("prefill_impl",)]
    ref, host = kernel_inputs("gluon")
    assert ref.name == "cartridge_attn/_gluon_prefill.py"
    # The host side that expands an FP8 cartridge for the kernel is pinned too.
    assert host.name == "cartridge_attn/gluon_host.py"
    assert host.sha256 == hashlib.sha256(Path(host.path).read_bytes()).hexdigest()
    assert source_sha256("gluon") == hashlib.sha256(source_path("gluon").read_bytes()).hexdigest()
    assert source_sha256("gluon") != source_sha256("triton")


def test_the_shared_memory_estimate_grows_with_every_buffer() -> None:
    cfg = prefill_config(4, 128, impl="gluon")
    base = H.gluon_shared_bytes(cfg, 128, 16)
    assert H.gluon_shared_bytes(cfg, 128, 8) > base  # FP8 live values land in a ring of their own
    assert H.gluon_shared_bytes(dataclasses.replace(cfg, num_stages=3), 128, 16) > base
    assert H.gluon_shared_bytes(cfg, 64, 16) < base
    # Deeper rings at head_dim 128 do not fit with FP8 live values: the default drops to 64-key tiles.
    assert H.gluon_shared_bytes(dataclasses.replace(cfg, num_stages=3), 128, 8) > H.SM90_SHARED_BYTES
    assert prefill_config(4, 128, impl="gluon", num_stages=3, live_v_bits=8).block_n == 64
    assert prefill_config(4, 128, impl="gluon", live_v_bits=8).block_n == 128


def test_a_gluon_launch_names_its_own_compiled_variant(kernel_device: torch.device) -> None:
    # A Triton and a Gluon configuration of the same tile shape are different binaries: the coverage table pairs a
    # timed launch with the numerics cell that qualified exactly its binary.
    from cartridge_attn.dispatch import specialization_of

    pr = random_problem([5, 3], [9, 30], device=kernel_device, **QWEN)
    attn = CartridgeAttention()
    triton_cfg = dataclasses.replace(prefill_config(4, 128, block_n=128, num_stages=2), block_m=128)
    plan = attn.plan(*pr.page_table(), config=triton_cfg, device=kernel_device, **pr.plan_kwargs())
    gluon_plan = dataclasses.replace(plan, config=prefill_config(4, 128, impl="gluon"))
    assert specialization_of(plan).config.tag == "m128n128r1w4s2"
    assert specialization_of(gluon_plan).key == specialization_of(plan).key + "gl"
    assert specialization_of(gluon_plan).config == gluon_plan.config


def test_the_fp16_expansion_of_fp8_cartridge_values_is_exact_and_follows_in_place_writes() -> None:
    # Every e4m3 bit pattern (NaN included) as cartridge values: the expansion holds the same numbers.
    every = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).reshape(2, 1, 128)
    wide = gluon_host.CartridgeV16().get(every)
    assert wide.dtype == torch.float16 and wide.is_contiguous() and wide.shape == every.shape
    torch.testing.assert_close(wide.float(), every.float(), rtol=0, atol=0, equal_nan=True)

    expansion = gluon_host.CartridgeV16()
    values = (torch.randn(16, 2, 64) * 4).to(torch.float8_e4m3fn)
    first = expansion.get(values)
    # Seen again unchanged, through the same tensor or another view of it: the same buffer, not recomputed (a
    # poisoned buffer stays poisoned).
    first.fill_(float("nan"))
    assert expansion.get(values) is first and expansion.get(values[:]) is first and torch.isnan(first).all()
    # An in-place write through torch, here through a view, is seen, and twice in a row: remade in the same buffer
    # (the TMA descriptors built over it stay valid).
    for rows in (slice(3, 5), slice(9, 10)):
        values[rows].copy_((torch.randn(values[rows].shape) * 4).to(torch.float8_e4m3fn))
        assert expansion.get(values) is first
        torch.testing.assert_close(first.float(), values.float(), rtol=0, atol=0)
    # Other elements (same address, another shape or strides) replace it.
    for other in (values[:8], values.transpose(0, 1)):
        again = expansion.get(other)
        assert again is not first and again.shape == other.shape
        torch.testing.assert_close(again.float(), other.float(), rtol=0, atol=0)
        first = again


def test_an_inference_tensor_is_expanded_at_every_launch() -> None:
    # vLLM runs its forward passes in inference mode: such a tensor has no version counter, so its expansion cannot
    # know it is current and is remade each time; the expansion itself is an ordinary tensor, which a later refresh
    # outside inference mode may write.
    with torch.inference_mode():
        values = (torch.randn(8, 2, 64) * 4).to(torch.float8_e4m3fn)
        expansion = gluon_host.CartridgeV16()
        wide = expansion.get(values)
        assert not wide.is_inference()
        values.copy_((torch.randn(8, 2, 64) * 4).to(torch.float8_e4m3fn))
        assert expansion.get(values) is wide
        torch.testing.assert_close(wide.float(), values.float(), rtol=0, atol=0)
    ordinary = (torch.randn(8, 2, 64) * 4).to(torch.float8_e4m3fn)
    with torch.inference_mode():
        inside = gluon_host.CartridgeV16()
        inside.get(ordinary)
    ordinary.copy_((torch.randn(8, 2, 64) * 4).to(torch.float8_e4m3fn))
    torch.testing.assert_close(inside.get(ordinary).float(), ordinary.float(), rtol=0, atol=0)


def test_each_layers_operands_carry_their_own_expansion(kernel_device: torch.device) -> None:
    # Serving keeps a layer's operands across steps, and may build a new wrapper per step: the expansion lives with
    # the operands, so it is made once per layer, whatever wrapper launches them.
    pr = random_problem([3, 2], [9, 30], device=kernel_device, **QWEN)
    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), device=kernel_device, **pr.plan_kwargs())
    layers = [attn.check_layer(pr.cartridge_k, pr.cartridge_v, pr.paged_kv, **pr.run_kwargs()) for _ in range(2)]
    made = [layer.cartridge_v16.get(layer.cartridge_v) for layer in layers]
    assert made[0] is not made[1]
    assert layers[0].cartridge_v16.get(layers[0].cartridge_v) is made[0]


class _RecordedDescriptor:
    """Stands in for Gluon's host TensorDescriptor: what the TMA unit would be told."""

    def __init__(self, base, shape, strides, block_shape, layout) -> None:
        self.base, self.shape, self.strides, self.block_shape = base, shape, strides, block_shape


@pytest.mark.parametrize("live_v", [torch.bfloat16, torch.float8_e4m3fn], ids=["live16", "live8"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("layout", ["separate", "combined", "interleaved"])
def test_live_views_are_described_with_their_own_rows_and_head_columns(
    monkeypatch: pytest.MonkeyPatch, live_v: torch.dtype, head_dim: int, layout: str
) -> None:
    # vLLM's split caches, FlashInfer's combined one and the serving plugin's pages (K then V in one row per token
    # and head: heads 2 D apart, or 1.5 D elements and 3 D bytes with FP8 values). Each live view becomes a 2-D
    # (token rows, columns) box source whose heads are its head stride apart, and nothing past a token's row.
    if layout == "combined" and live_v != torch.bfloat16:
        pytest.skip("the combined layout holds K and V in one dtype")
    hopper = pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    monkeypatch.setattr(hopper, "TensorDescriptor", _RecordedDescriptor)
    monkeypatch.setattr(gluon_host, "_shared_layout", lambda block, dtype: None)
    monkeypatch.setattr(gluon_host, "_gl_dtype", lambda t: t.dtype)
    pr = random_problem([5, 3], [9, 30], live_v_dtype=live_v, combined=layout == "combined",
                        interleaved=layout == "interleaved", **(QWEN | {"head_dim": head_dim}))  # fmt: skip
    cart_v = pr.cartridge_v.to(torch.float16)
    ck, cv, lk, lv, page_rows, lk_cols, lv_cols = gluon_host.descriptors(
        pr.cartridge_k, cart_v, pr.live_k, pr.live_v, 128, 8
    )
    h_kv, n_pages = 8, pr.live_k.shape[0]
    for desc, cart in ((ck, pr.cartridge_k), (cv, cart_v)):
        assert desc.base is cart and (desc.shape, desc.strides, desc.block_shape) == (
            [632, h_kv * head_dim], [h_kv * head_dim, 1], [128, head_dim]
        )  # fmt: skip
    assert page_rows == {"separate": 8, "combined": 16, "interleaved": 8}[layout]
    v_room = head_dim * live_v.itemsize // 2  # BF16 elements a token's values take in an interleaved row
    want_cols = {"separate": (head_dim, head_dim), "combined": (head_dim, head_dim),
                 "interleaved": (head_dim + v_room, (head_dim + v_room) * 2 // live_v.itemsize)}[layout]  # fmt: skip
    assert (lk_cols, lv_cols) == want_cols
    for desc, view, cols in ((lk, pr.live_k, lk_cols), (lv, pr.live_v, lv_cols)):
        token_stride = view.stride(1)
        assert desc.base is view and desc.block_shape == [8, head_dim]
        assert desc.shape == [(n_pages - 1) * page_rows + 8, (h_kv - 1) * cols + head_dim]
        assert desc.strides == [token_stride, 1] and desc.shape[1] <= token_stride


def test_layouts_the_gluon_prefill_cannot_read_are_refused_naming_the_tensor_and_the_other_prefill() -> None:
    pr = random_problem([5, 3], [9, 30], **QWEN)
    # (pages, H, P, D) in memory viewed as (pages, P, H, D): a head's tokens are adjacent, not a token's heads.
    hnd_k = pr.live_k.transpose(1, 2).contiguous().transpose(1, 2)
    with pytest.raises(UnsupportedLayoutError, match=r"live K pages strides.*prefill_impl='triton'"):
        gluon_host.descriptors(pr.cartridge_k, pr.cartridge_v, hnd_k, pr.live_v, 128, 8)
    # Heads 8 bytes off a 16-byte boundary (a padded row of D + 4 BF16 values).
    padded = torch.zeros(*pr.live_v.shape[:3], 132, dtype=torch.bfloat16)[..., :128]
    with pytest.raises(UnsupportedLayoutError, match=r"live V pages base / token stride / head stride"):
        gluon_host.descriptors(pr.cartridge_k, pr.cartridge_v.float().to(torch.float16), pr.live_k, padded, 128, 8)
    # A cartridge whose heads are not adjacent (a slice of a wider one).
    wide = torch.zeros(632, 8, 256, dtype=torch.bfloat16)[..., :128]
    with pytest.raises(UnsupportedLayoutError, match=r"cartridge K strides.*heads adjacent"):
        gluon_host.descriptors(wide, pr.cartridge_v, pr.live_k, pr.live_v, 128, 8)
    # K and V pages a different number of token rows apart (K from a combined cache, V from a split one).
    combined_k = random_problem([5, 3], [9, 30], combined=True, **QWEN).live_k
    with pytest.raises(UnsupportedLayoutError, match="live V pages page stride"):
        gluon_host.descriptors(pr.cartridge_k, pr.cartridge_v, combined_k, pr.live_v, 128, 8)
