"""``load_format="qualify_seeded"``: deterministic random weights at a realistic scale, for correctness checks.

vLLM's ``dummy`` weights are uniform in +-1e-3 (norm weights included), which makes every layer's output
vanishingly small next to the token embedding: attention then barely moves the logits, and a check that two
attention paths give the same tokens would pass whatever attention did. Here matrices are N(0, std) with the
config's ``initializer_range`` (0.02), norm weights 1 and biases 0, each parameter seeded from its name, so
attention shapes every token and two engines built from the same config hold the same weights. Timing runs
keep ``dummy``; the numbers from this loader say nothing about a trained model's quality.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch
from vllm.model_executor.model_loader import register_model_loader
from vllm.model_executor.model_loader.base_loader import BaseModelLoader

LOAD_FORMAT = "qualify_seeded"
SEED = 20261201


def _is_norm(name: str) -> bool:
    leaf = name.rsplit(".", 2)
    return name.endswith(".weight") and len(leaf) >= 2 and leaf[-2].endswith("norm")


@torch.no_grad()
def seeded_init(model: torch.nn.Module, std: float, seed: int = SEED) -> None:
    for name, param in model.named_parameters():
        if not torch.is_floating_point(param):
            continue
        if _is_norm(name):
            param.fill_(1.0)
        elif name.endswith(".bias") or param.dim() < 2:
            param.zero_()
        else:
            gen = torch.Generator(device="cpu")
            gen.manual_seed(seed ^ zlib.crc32(name.encode()))
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32).mul_(std).to(param.dtype))


@register_model_loader(LOAD_FORMAT)
class SeededModelLoader(BaseModelLoader):
    def download_model(self, model_config: Any) -> None:
        return

    def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
        std = float(getattr(model_config.hf_config, "initializer_range", 0.02) or 0.02)
        seeded_init(model, std)
