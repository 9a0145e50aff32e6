"""The same evaluation on CUDA: float32 must match one forward, bf16 (the served dtype) must run and agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from qualify.loss.evaluate import evaluate_layouts, evaluate_loss
from qualify.quant.layouts import ALL_LAYOUTS, Layout

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_cuda_float32_matches_cpu(
    seed: int, gen: torch.Generator, make_model, make_prefix_cartridge, make_items, vocab
) -> None:
    model = make_model(seed)
    cart = make_prefix_cartridge(model, torch.randint(0, vocab, (9,), generator=gen))
    items = make_items(gen, 9)
    cpu = evaluate_loss(model, cart, items, batch_size=4)
    gpu = evaluate_loss(model.cuda(), cart, items, batch_size=4)  # cartridge stays on CPU: moved inside
    np.testing.assert_allclose(gpu.item_nll, cpu.item_nll, rtol=1e-4, atol=1e-4)


def test_cuda_bf16_layouts(
    seed: int, gen: torch.Generator, make_model, make_prefix_cartridge, make_items, vocab
) -> None:
    model = make_model(seed)
    cart = make_prefix_cartridge(model, torch.randint(0, vocab, (9,), generator=gen)).to(dtype=torch.bfloat16)
    items = make_items(gen, 9)
    reference = evaluate_loss(model, cart, items, batch_size=4).loss
    model = model.to(device="cuda", dtype=torch.bfloat16)
    cmp = evaluate_layouts(model, cart, items, ALL_LAYOUTS, batch_size=4, n_resamples=200)
    assert cmp.reference.loss == pytest.approx(reference, rel=2e-2)
    by = {r.layout: r for r in cmp.layouts}
    assert by[Layout.K16_V16].rel_increase == 0.0 and by[Layout.K16_V16].top1_agreement == 1.0
    for r in cmp.layouts:
        assert np.isfinite([r.loss, r.rel_increase, r.ci_low, r.ci_high, r.kl_mean]).all()
