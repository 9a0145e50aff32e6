"""Loss behind a cartridge: positions, masks, padding, batching, and the layout comparison."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache, LlamaForCausalLM

from qualify.cartridge.types import Cartridge
from qualify.errors import CartridgeError, DataError
from qualify.hf_cache_arg import cache_kwargs
from qualify.loss.data import EvalItem
from qualify.loss.evaluate import evaluate_layouts, evaluate_loss
from qualify.quant.apply import apply_layout
from qualify.quant.fp8 import Scaling
from qualify.quant.layouts import ALL_LAYOUTS, Layout


def _one_forward_nll(model: LlamaForCausalLM, prefix: torch.Tensor, item: EvalItem) -> float:
    """Summed answer NLL from a single unbatched forward over prefix + item: the ground truth."""
    full = torch.cat([prefix, torch.tensor(item.input_ids)]).unsqueeze(0)
    with torch.inference_mode():
        logp = torch.log_softmax(model(full).logits[0].float(), dim=-1)
    p = len(prefix)
    return sum(
        -float(logp[p + i - 1, tok])
        for i, (tok, bit) in enumerate(zip(item.input_ids, item.answer_mask, strict=True))
        if bit
    )


@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_cartridge_of_a_real_prefix_equals_one_forward(
    batch_size: int,
    seed: int,
    gen: torch.Generator,
    make_model,
    make_prefix_cartridge,
    make_items,
    vocab,
) -> None:
    model = make_model(seed)
    prefix = torch.randint(0, vocab, (9,), generator=gen)
    cart = make_prefix_cartridge(model, prefix)
    items = make_items(gen, 7)  # lengths differ, so batches of 3 and 16 are right-padded
    result = evaluate_loss(model, cart, items, batch_size=batch_size)
    want = np.array([_one_forward_nll(model, prefix, item) for item in items])
    np.testing.assert_allclose(result.item_nll, want, rtol=1e-5, atol=1e-5)
    assert result.item_tokens.tolist() == [item.num_answer_tokens for item in items]
    assert result.n_tokens == sum(item.num_answer_tokens for item in items)
    assert result.loss == pytest.approx(want.sum() / result.n_tokens, rel=1e-5)
    assert result.item_ids == tuple(item.id for item in items)


def test_position_offset_matters(
    seed: int,
    gen: torch.Generator,
    make_model,
    make_prefix_cartridge,
    make_items,
    vocab,
) -> None:
    # Guards the test above: a cartridge of a different prefix must not reproduce the same losses.
    model = make_model(seed)
    prefix = torch.randint(0, vocab, (9,), generator=gen)
    items = make_items(gen, 4)
    right = evaluate_loss(model, make_prefix_cartridge(model, prefix), items).item_nll
    shorter = evaluate_loss(model, make_prefix_cartridge(model, prefix[:-1]), items).item_nll
    assert np.abs(right - shorter).max() > 1e-3


def _trained_cartridge(model: LlamaForCausalLM, items: list[EvalItem], key_scale: float) -> Cartridge:
    """A cartridge optimized on the items, so it sits near a loss minimum any perturbation climbs out of.

    Keys are parameterized as key_scale * k: large trained keys, as in real cartridges, are where the few
    mantissa bits of E4M3 turn into sizeable attention-logit errors.
    """
    cfg = model.config
    heads, dim, tokens, layers = cfg.num_key_value_heads, cfg.head_dim, 12, cfg.num_hidden_layers
    k = [torch.randn(1, heads, tokens, dim, requires_grad=True) for _ in range(layers)]
    v = [torch.randn(1, heads, tokens, dim, requires_grad=True) for _ in range(layers)]
    opt = torch.optim.Adam(k + v, lr=0.05)
    ids = torch.tensor([item.input_ids for item in items])
    mask = torch.tensor([item.answer_mask for item in items], dtype=torch.bool)[:, 1:]
    b, length = ids.shape
    for _ in range(150):
        cache = DynamicCache(
            [(key_scale * kk.expand(b, -1, -1, -1), vv.expand(b, -1, -1, -1)) for kk, vv in zip(k, v, strict=True)],
            config=cfg,
        )
        out = model(
            input_ids=ids,
            position_ids=torch.arange(tokens, tokens + length).expand(b, -1),
            **cache_kwargs(model, cache),
        )
        logp = torch.log_softmax(out.logits[:, :-1], dim=-1)
        loss = -logp.gather(2, ids[:, 1:, None]).squeeze(2)[mask].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return Cartridge(
        keys=tuple((key_scale * kk[0].detach()).permute(1, 0, 2).contiguous().bfloat16() for kk in k),
        values=tuple(vv[0].detach().permute(1, 0, 2).contiguous().bfloat16() for vv in v),
        frozen_tokens=1,
        source="mem://trained",
    )


def _fixed_length_items(gen: torch.Generator, vocab, n: int, length: int) -> list[EvalItem]:
    out = []
    for i in range(n):
        ids = torch.randint(0, vocab, (length,), generator=gen).tolist()
        mask = [0] * 4 + [1] * (length - 4)
        out.append(EvalItem(id=f"t{i}", text="", input_ids=tuple(ids), answer_mask=tuple(mask)))
    return out


def test_fp8_keys_damage_a_trained_cartridge(seed: int, gen: torch.Generator, make_model, vocab: int) -> None:
    model = make_model(seed)
    items = _fixed_length_items(gen, vocab, 6, 12)
    cart = _trained_cartridge(model, items, key_scale=16.0)
    comparison = evaluate_layouts(model, cart, items, ALL_LAYOUTS, batch_size=4)
    by = {r.layout: r for r in comparison.layouts}
    for layout in (Layout.K8_V16, Layout.K8_V8):
        r = by[layout]
        assert r.rel_increase > 0 and r.ci_low > 0, r
        assert r.loss > comparison.reference.loss
        assert r.kl_mean > 1e-5
        assert r.ci_low <= r.rel_increase <= r.ci_high
    assert by[Layout.K16_V8].rel_increase > 0
    # The ordering seen on real cartridges: FP8 keys cost more than FP8 values.
    assert by[Layout.K8_V16].rel_increase > by[Layout.K16_V8].rel_increase
    # Per-layer saturated counts reach the result (trained keys stay below 448 here, so none).
    assert by[Layout.K8_V8].saturated_k == sum(comparison.quant_stats[3].saturated_k)


def test_k16v16_is_exactly_the_reference(
    seed: int,
    gen: torch.Generator,
    make_model,
    make_prefix_cartridge,
    make_items,
    vocab,
) -> None:
    model = make_model(seed)
    cart = make_prefix_cartridge(model, torch.randint(0, vocab, (6,), generator=gen)).to(dtype=torch.bfloat16)
    items = make_items(gen, 5)
    comparison = evaluate_layouts(model, cart, items, ["k16v16", "K8/V8"], batch_size=2, n_resamples=200)
    same = comparison.layouts[0]
    assert same.layout is Layout.K16_V16
    assert same.loss == comparison.reference.loss
    assert (same.rel_increase, same.ci_low, same.ci_high, same.kl_mean) == (0.0, 0.0, 0.0, 0.0)
    assert same.top1_agreement == 1.0
    assert same.n_tokens == comparison.reference.n_tokens == sum(i.num_answer_tokens for i in items)
    # The reference pass is the plain loss pass: same batches, same numbers, bit for bit.
    plain = evaluate_loss(model, cart, items, batch_size=2)
    assert np.array_equal(plain.item_nll, comparison.items.reference_nll)
    assert plain.loss == comparison.reference.loss
    assert comparison.layouts[1].kl_mean > 0


def _independent_kl_top1(model: LlamaForCausalLM, ref: Cartridge, lay: Cartridge, item: EvalItem) -> tuple[float, int]:
    """KL(ref || lay) and argmax matches for one item, through model() and a hand-built cache."""

    def logp(cart: Cartridge) -> torch.Tensor:
        cache = DynamicCache(
            [
                (k.float().permute(1, 0, 2)[None], v.float().permute(1, 0, 2)[None])
                for k, v in zip(cart.keys, cart.values, strict=True)
            ],
        )
        t = cart.num_tokens
        ids = torch.tensor(item.input_ids)[None]
        with torch.inference_mode():
            out = model(
                input_ids=ids, **cache_kwargs(model, cache), position_ids=torch.arange(t, t + ids.shape[1])[None]
            )
        return torch.log_softmax(out.logits[0].double(), dim=-1)

    a, b = logp(ref), logp(lay)
    rows = [i - 1 for i, bit in enumerate(item.answer_mask) if bit]
    a, b = a[rows], b[rows]
    kl = float((a.exp() * (a - b)).sum())
    matches = int((a.argmax(-1) == b.argmax(-1)).sum())
    return kl, matches


def test_kl_direction_and_top1_match_an_independent_computation(
    seed: int,
    gen: torch.Generator,
    make_model,
    make_prefix_cartridge,
    make_items,
    vocab,
) -> None:
    model = make_model(seed)
    cart = make_prefix_cartridge(model, torch.randint(0, vocab, (8,), generator=gen))
    # Keys so large that unscaled FP8 clips them at 448: the distributions move far enough that KL(ref || lay)
    # and KL(lay || ref) differ well beyond float32 noise, so the direction is checked too.
    cart = Cartridge(tuple(k / k.abs().amax() * 3000 for k in cart.keys), cart.values, 1, "mem://big")
    items = make_items(gen, 4, min_len=8)
    comparison = evaluate_layouts(model, cart, items, [Layout.K8_V8], batch_size=3, n_resamples=100)
    lay, _ = apply_layout(cart, Layout.K8_V8)
    scores = comparison.items.by_layout[0]
    for idx, item in enumerate(items):
        kl, matches = _independent_kl_top1(model, cart, lay, item)
        assert scores.kl[idx] == pytest.approx(kl, rel=1e-3, abs=1e-6)
        assert scores.top1_matches[idx] == matches
    assert comparison.layouts[0].kl_mean == pytest.approx(scores.kl.sum() / comparison.reference.n_tokens)


def test_cartridge_is_not_mutated_and_batches_do_not_leak(
    seed: int,
    gen: torch.Generator,
    make_model,
    make_prefix_cartridge,
    make_items,
    vocab,
) -> None:
    model = make_model(seed)
    cart = make_prefix_cartridge(model, torch.randint(0, vocab, (5,), generator=gen))
    snapshot = [t.clone() for t in cart.keys + cart.values]
    items = make_items(gen, 7)
    one_batch = evaluate_layouts(model, cart, items, ["K8/V8"], batch_size=len(items), n_resamples=50)
    many = evaluate_layouts(model, cart, items, ["K8/V8"], batch_size=2, n_resamples=50)
    for before, after in zip(snapshot, cart.keys + cart.values, strict=True):
        assert torch.equal(before, after)
    # A cache that grew across batches would give later batches a longer prefix and different losses.
    np.testing.assert_allclose(many.items.reference_nll, one_batch.items.reference_nll, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(many.items.by_layout[0].nll, one_batch.items.by_layout[0].nll, rtol=1e-5, atol=1e-5)


def test_bootstrap_is_seeded(
    seed: int,
    gen: torch.Generator,
    make_model,
    make_prefix_cartridge,
    make_items,
    vocab,
) -> None:
    model = make_model(seed)
    cart = make_prefix_cartridge(model, torch.randint(0, vocab, (5,), generator=gen))
    cart = Cartridge(tuple(k * 20 for k in cart.keys), cart.values, 1, "mem://big")
    items = make_items(gen, 12)
    runs = [evaluate_layouts(model, cart, items, ["K8/V16"], n_resamples=300, seed=s) for s in (1, 1, 2)]
    cis = [(r.layouts[0].ci_low, r.layouts[0].ci_high) for r in runs]
    assert cis[0] == cis[1]
    assert cis[0] != cis[2]
    assert runs[0].n_resamples == 300 and runs[2].seed == 2


def test_per_tensor_scaling_is_reported(
    seed: int,
    gen: torch.Generator,
    make_model,
    make_prefix_cartridge,
    make_items,
    vocab,
) -> None:
    model = make_model(seed)
    cart = make_prefix_cartridge(model, torch.randint(0, vocab, (5,), generator=gen))
    # Peak |k| of 2000 per layer: past 448, so unscaled FP8 must clip.
    cart = Cartridge(tuple(k / k.abs().amax() * 2000 for k in cart.keys), cart.values, 1, "mem://huge")
    items = make_items(gen, 3)
    plain = evaluate_layouts(model, cart, items, ["K8/V16"], n_resamples=50)
    scaled = evaluate_layouts(model, cart, items, ["K8/V16"], scaling="per_tensor", n_resamples=50)
    assert plain.layouts[0].saturated_k > 0 and plain.layouts[0].scaling is Scaling.NONE
    assert scaled.layouts[0].saturated_k == 0 and scaled.layouts[0].scaling is Scaling.PER_TENSOR
    assert len(scaled.quant_stats[0].k_scales[0]) == 1


def test_rejects_misfits(
    seed: int,
    gen: torch.Generator,
    make_model,
    make_prefix_cartridge,
    make_items,
    vocab,
) -> None:
    model = make_model(seed)
    cart = make_prefix_cartridge(model, torch.randint(0, vocab, (5,), generator=gen))
    items = make_items(gen, 2)
    wrong = Cartridge(cart.keys[:1], cart.values[:1], 1, "mem://one-layer")
    with pytest.raises(CartridgeError, match="mem://one-layer"):
        evaluate_loss(model, wrong, items)
    bad = [*items, EvalItem("oov", "", (1, vocab), (0, 1))]
    with pytest.raises(DataError, match=r"'oov'.*input_ids'\[1\]"):
        evaluate_loss(model, cart, bad)
    with pytest.raises(ValueError, match="twice"):
        evaluate_layouts(model, cart, items, ["K8/V8", "k8v8"])
    model.train()
    with pytest.raises(ValueError, match="eval"):
        evaluate_loss(model, cart, items)
