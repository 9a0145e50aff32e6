from __future__ import annotations

import pytest
import torch

from qualify.accuracy.kv_cache import layout_write, new_cache
from qualify.hf_cache_arg import cache_kwargs
from qualify.quant.fp8 import fake_quant_e4m3


def _forward(tiny_lm, ids: torch.Tensor, transform):  # type: ignore[no-untyped-def]
    cache = new_cache(transform, tiny_lm.model.config)
    with torch.no_grad():
        out = tiny_lm.model(input_ids=ids, **cache_kwargs(tiny_lm.model, cache), use_cache=True)
    return out.logits, cache


def test_keys_are_captured_after_rope_and_stored_quantized(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = tiny_lm.model
    ids = torch.randint(3, model.config.vocab_size, (2, 12))
    pre_rope: list[torch.Tensor] = []
    written: list[tuple[torch.Tensor, torch.Tensor]] = []
    attn0 = model.model.layers[0].self_attn
    handle = attn0.k_proj.register_forward_hook(lambda m, i, o: pre_rope.append(o.detach().clone()))
    k8v8 = layout_write("K8/V8")

    def recording(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        written.append((k.clone(), v.clone()))
        return k8v8(k, v)

    try:
        _, cache = _forward(tiny_lm, ids, recording)
    finally:
        handle.remove()
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    k_pre = pre_rope[0].view(2, 12, -1, head_dim).transpose(1, 2)
    positions = torch.arange(12).expand(2, 12)
    cos, sin = model.model.rotary_emb(k_pre, positions)
    _, k_rope = apply_rotary_pos_emb(k_pre, k_pre, cos, sin)
    k_written = written[0][0]
    # What reaches the cache is the rotated key, not the projection output (RoPE is the identity at position 0).
    torch.testing.assert_close(k_written, k_rope, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(k_written[:, :, 1:], k_pre[:, :, 1:], atol=1e-3)
    stored = cache.layers[0]
    torch.testing.assert_close(stored.keys, fake_quant_e4m3(k_written).values, rtol=0, atol=0)
    torch.testing.assert_close(stored.values, fake_quant_e4m3(written[0][1]).values, rtol=0, atol=0)
    assert not torch.equal(stored.keys, k_written)


@pytest.mark.parametrize(("layout", "k_changes", "v_changes"), [("K16/V8", False, True), ("K8/V16", True, False)])
def test_each_layout_quantizes_only_its_fp8_side(tiny_lm, layout: str, k_changes: bool, v_changes: bool) -> None:  # type: ignore[no-untyped-def]
    ids = torch.randint(3, tiny_lm.model.config.vocab_size, (1, 9))
    _, plain = _forward(tiny_lm, ids, layout_write("K16/V16"))
    _, quant = _forward(tiny_lm, ids, layout_write(layout))
    # Layer 0 sees the same input under both layouts, so only the FP8 side may differ there.
    first_plain, first_quant = plain.layers[0], quant.layers[0]
    assert torch.equal(first_plain.keys, first_quant.keys) != k_changes
    assert torch.equal(first_plain.values, first_quant.values) != v_changes
    # In every layer the FP8 side holds only E4M3 values (rounding them again changes nothing).
    for layer in quant.layers:
        for stored, fp8 in ((layer.keys, k_changes), (layer.values, v_changes)):
            if fp8:
                assert torch.equal(fake_quant_e4m3(stored).values, stored)


def test_k16v16_is_transparent_and_fp8_changes_the_output(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    ids = torch.randint(3, tiny_lm.model.config.vocab_size, (2, 10))
    with torch.no_grad():
        baseline = tiny_lm.model(input_ids=ids).logits
    same, _ = _forward(tiny_lm, ids, layout_write("K16/V16"))
    k8v8, _ = _forward(tiny_lm, ids, layout_write("K8/V8"))
    torch.testing.assert_close(same, baseline, rtol=0, atol=0)
    assert (k8v8 - baseline).abs().max() > 1e-4


def test_generation_reads_the_quantized_cache(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    ids = torch.randint(3, tiny_lm.model.config.vocab_size, (1, 6))
    seen: list[int] = []

    def counting(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(k.shape[-2])
        return k, torch.zeros_like(v)

    tiny_lm.model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=4,
        min_new_tokens=4,
        do_sample=False,
        **cache_kwargs(tiny_lm.model, new_cache(counting, tiny_lm.model.config)),
        pad_token_id=0,
    )
    layers = tiny_lm.model.config.num_hidden_layers
    # One prefill write of 6 tokens per layer, then one write per decoded token per layer.
    assert seen[:layers] == [6] * layers
    assert seen[layers:] == [1] * (3 * layers)
