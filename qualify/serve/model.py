"""Shared mode: models whose token positions start after the cartridge.

The shared cartridge occupies positions ``0 .. cartridge_len - 1`` outside the paged cache, so a request's
prompt carries only its own tokens, and vLLM numbers them from 0. These subclasses add ``cartridge_len`` to
the positions before RoPE, which is all that differs from the stock model. Registered through
``ModelRegistry`` by `plugin.register`; selected with ``hf_overrides={"architectures": [...]}``.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.model_executor.models.llama import LlamaForCausalLM
from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM
from vllm.model_executor.models.qwen3 import Qwen3ForCausalLM

from qualify.serve.config import Mode, checked_serving
from qualify.serve.plugin import require_supported_vllm


def _cartridge_offset(vllm_config: Any) -> int:
    require_supported_vllm()
    cfg, _ = checked_serving(vllm_config, Mode.SHARED, "the Cartridge* architectures (positions after the cartridge)")
    return cfg.cartridge_len


class CartridgeQwen3ForCausalLM(Qwen3ForCausalLM):
    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.cartridge_len = _cartridge_offset(vllm_config)

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return super().forward(input_ids, positions + self.cartridge_len, *args, **kwargs)


class CartridgeQwen2ForCausalLM(Qwen2ForCausalLM):
    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.cartridge_len = _cartridge_offset(vllm_config)

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return super().forward(input_ids, positions + self.cartridge_len, *args, **kwargs)


class CartridgeLlamaForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.cartridge_len = _cartridge_offset(vllm_config)

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return super().forward(input_ids, positions + self.cartridge_len, *args, **kwargs)
