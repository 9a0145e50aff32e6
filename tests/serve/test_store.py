"""qualify.serve.store: per-head FP8 values and loading a cartridge file for serving."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from qualify.cartridge.io import save_cartridge
from qualify.cartridge.types import Cartridge
from qualify.serve.config import CartridgeServingError, EngineFacts, RankHeads, ServingConfig, rank_heads
from qualify.serve.store import FP8, fp8_per_head, load_layers

FP8_MAX = 448.0


@pytest.fixture
def gen(test_seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(test_seed)


def test_fp8_per_head_scale_and_round_trip(gen: torch.Generator) -> None:
    t, h, d = 37, 4, 64
    # Heads of very different magnitudes, so that one shared scale would fail the bound below.
    mags = torch.tensor([1e-3, 0.5, 3.0, 200.0])
    v = (torch.randn(t, h, d, generator=gen) * mags[None, :, None]).to(torch.bfloat16)
    q, scale = fp8_per_head(v)
    assert q.dtype == FP8 and q.shape == v.shape
    assert scale.dtype == torch.float32 and scale.shape == (h,)
    amax = v.float().abs().amax(dim=(0, 2))
    torch.testing.assert_close(scale, amax / FP8_MAX, rtol=1e-6, atol=0)
    # The largest element of each head maps to +-448 exactly.
    assert torch.equal(q.float().abs().amax(dim=(0, 2)), torch.full((h,), FP8_MAX))
    # E4M3 keeps 3 mantissa bits: relative error <= 2^-4 for normals; subnormals (below 2^-6) are spaced
    # 2^-9 apart, so the absolute error there is <= 2^-10, in units of the scale.
    back = q.float() * scale[None, :, None]
    err = (back - v.float()).abs()
    bound = v.float().abs() * 2.0**-4 + scale[None, :, None] * 2.0**-10
    assert (err <= bound * (1 + 1e-5)).all(), f"worst excess {float((err - bound).max()):.3e}"
    assert torch.isfinite(back).all()


def test_fp8_per_head_all_zero_head_stays_zero(gen: torch.Generator) -> None:
    v = torch.randn(9, 3, 16, generator=gen).to(torch.bfloat16)
    v[:, 1] = 0
    q, scale = fp8_per_head(v)
    assert torch.isfinite(scale).all() and (scale > 0).all()
    assert torch.equal(q[:, 1].float(), torch.zeros(9, 16))
    assert not torch.isnan(q.float()).any()


def _cartridge(gen: torch.Generator, layers: int, tokens: int, heads: int, dim: int) -> Cartridge:
    keys = tuple(torch.randn(tokens, heads, dim, generator=gen) for _ in range(layers))
    values = tuple(torch.randn(tokens, heads, dim, generator=gen) * (1 + i) for i in range(layers))
    return Cartridge(keys=keys, values=values, frozen_tokens=1, source="mem://test")


def _engine(layers: int, heads: int, dim: int, qo: int | None = None) -> EngineFacts:
    return EngineFacts(
        architectures=("CartridgeQwen3ForCausalLM",),
        num_layers=layers,
        num_qo_heads=qo or heads * 2,
        num_kv_heads=heads,
        head_dim=dim,
        block_size=8,
        kv_cache_dtype="auto",
        model_dtype="bfloat16",
        speculative=False,
        prefix_caching=False,
        cascade_attn=False,
        attention_backend="CUSTOM",
        kv_connector=None,
    )


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
@pytest.mark.parametrize("value_dtype", ["bfloat16", "fp8_e4m3"])
def test_load_layers(tmp_path: Path, gen: torch.Generator, suffix: str, value_dtype: str) -> None:
    layers, tokens, heads, dim = 3, 16, 2, 8
    cart = _cartridge(gen, layers, tokens, heads, dim)
    path = save_cartridge(cart, tmp_path / f"cart{suffix}")
    cfg = ServingConfig(mode="shared", path=str(path), cartridge_len=tokens, cartridge_value_dtype=value_dtype)
    out = load_layers(cfg, _engine(layers, heads, dim), torch.device("cpu"), value_dtype=value_dtype)
    assert len(out) == layers
    for i, layer in enumerate(out):
        assert layer.k.dtype == torch.bfloat16 and layer.k.is_contiguous()
        assert torch.equal(layer.k, cart.keys[i].to(torch.bfloat16))
        v16 = cart.values[i].to(torch.bfloat16)
        assert layer.v.is_contiguous() and layer.v.shape == (tokens, heads, dim)
        if value_dtype == "bfloat16":
            assert layer.v.dtype == torch.bfloat16 and layer.v_scale is None
            assert torch.equal(layer.v, v16)
        else:
            q, scale = fp8_per_head(v16)
            assert layer.v.dtype == FP8 and torch.equal(layer.v_scale, scale)
            assert torch.equal(layer.v.view(torch.uint8), q.view(torch.uint8))
    # Layers keep their order (values were drawn with per-layer magnitudes 1, 2, 3).
    if value_dtype == "fp8_e4m3":
        assert out[0].v_scale.mean() < out[2].v_scale.mean()


@pytest.mark.parametrize(
    ("engine_shape", "cartridge_len", "what"),
    [
        ((3, 2, 8), 15, "length"),  # the file has 16 tokens
        ((4, 2, 8), 16, "shape"),  # layers
        ((3, 1, 8), 16, "shape"),  # kv heads
        ((3, 2, 16), 16, "shape"),  # head_dim
    ],
    ids=["length", "layers", "kv-heads", "head-dim"],
)
def test_load_layers_refuses_a_mismatched_file(
    tmp_path: Path, gen: torch.Generator, engine_shape: tuple, cartridge_len: int, what: str
) -> None:
    path = save_cartridge(_cartridge(gen, 3, 16, 2, 8), tmp_path / "mismatch.safetensors")
    cfg = ServingConfig(mode="shared", path=str(path), cartridge_len=cartridge_len)
    with pytest.raises(CartridgeServingError) as exc:
        load_layers(cfg, _engine(*engine_shape), torch.device("cpu"), value_dtype="bfloat16")
    assert str(path) in str(exc.value) and what in str(exc.value), str(exc.value)


@pytest.mark.parametrize(("qo", "kv", "tp"), [(32, 8, 1), (32, 8, 2), (32, 8, 8), (32, 8, 16), (9, 3, 3), (24, 8, 4),
                                              (16, 2, 8)])  # fmt: skip
def test_each_rank_holds_the_kv_heads_of_its_own_query_heads(qo: int, kv: int, tp: int) -> None:
    group = qo // kv
    ranks = [RankHeads(tp, r, qo, kv) for r in range(tp)]
    # Query heads split evenly and cover the model once; each rank's keys are the heads its queries attend.
    assert [q for r in ranks for q in r.qo_heads] == list(range(qo))
    for r in ranks:
        assert {q // group for q in r.qo_heads} == set(r.kv_heads)
        local = r.local(_engine(1, kv, 8, qo=qo))
        assert (local.num_qo_heads, local.num_kv_heads) == (qo // tp, len(r.kv_heads))
    # Every KV head is held by some rank; beyond one head per rank, each is replicated over tp / kv ranks.
    held = [h for r in ranks for h in r.kv_heads]
    assert sorted(set(held)) == list(range(kv))
    assert all(held.count(h) == max(1, tp // kv) for h in range(kv))


@pytest.mark.parametrize(("qo", "kv", "tp", "rank", "what"), [(32, 8, 3, 0, "does not divide the 32 query heads"),
                                                               (24, 6, 4, 0, "neither divides nor is a multiple"),
                                                               (32, 8, 2, 2, "not a rank")])  # fmt: skip
def test_rank_heads_refuses_splits_vllm_cannot_make(qo: int, kv: int, tp: int, rank: int, what: str) -> None:
    with pytest.raises(CartridgeServingError, match=what):
        RankHeads(tp, rank, qo, kv)


@pytest.mark.parametrize("value_dtype", ["bfloat16", "fp8_e4m3"])
def test_a_ranks_cartridge_is_exactly_its_heads_of_the_whole(tmp_path: Path, gen: torch.Generator,
                                                            value_dtype: str) -> None:  # fmt: skip
    layers, tokens, heads, dim, tp = 2, 16, 4, 8, 2
    path = save_cartridge(_cartridge(gen, layers, tokens, heads, dim), tmp_path / "c.safetensors")
    cfg = ServingConfig(mode="shared", path=str(path), cartridge_len=tokens, cartridge_value_dtype=value_dtype)
    engine = _engine(layers, heads, dim)
    whole = load_layers(cfg, engine, torch.device("cpu"), value_dtype=value_dtype)
    for rank in range(tp):
        kv = rank_heads(replace(engine, tensor_parallel_size=tp), rank).kv_heads
        part = load_layers(cfg, engine, torch.device("cpu"), value_dtype=value_dtype, heads=kv)
        for w, p in zip(whole, part, strict=True):
            assert p.k.is_contiguous() and p.v.is_contiguous() and p.k.shape == (tokens, len(kv), dim)
            assert torch.equal(p.k, w.k[:, kv.start : kv.stop])
            # Per-head FP8: the slice's values and scales are bit for bit those heads' of the whole cartridge.
            assert torch.equal(p.v.view(torch.uint8), w.v[:, kv.start : kv.stop].contiguous().view(torch.uint8))
            if value_dtype == "fp8_e4m3":
                assert torch.equal(p.v_scale, w.v_scale[kv.start : kv.stop])
