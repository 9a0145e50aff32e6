"""Shared mode: models whose token positions start after the cartridge.

The shared cartridge occupies positions ``0 .. cartridge_len - 1`` outside the paged cache, so a request's
prompt carries only its own tokens, and vLLM numbers them from 0. These subclasses rotate position ``p`` as
``p + cartridge_len`` (`rope_shift`: each layer's rotary table starts at the offset), which is all that differs
from the stock model; ``forward`` is vLLM's own, so torch.compile and CUDA graphs see the stock graph.
Registered through ``ModelRegistry`` by `plugin.register`; selected with ``hf_overrides={"architectures": [...]}``.
"""

from __future__ import annotations

from typing import Any

from vllm.model_executor.models.llama import LlamaForCausalLM
from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM
from vllm.model_executor.models.qwen3 import Qwen3ForCausalLM

from qualify.serve.config import Mode, checked_serving
from qualify.serve.plugin import require_supported_vllm
from qualify.serve.rope_shift import shift_rotary_positions


def _cartridge_offset(vllm_config: Any) -> int:
    require_supported_vllm()
    cfg, _ = checked_serving(vllm_config, Mode.SHARED, "the Cartridge* architectures (positions after the cartridge)")
    return cfg.cartridge_len


def _after_cartridge(model: Any, vllm_config: Any) -> int:
    offset = _cartridge_offset(vllm_config)
    shift_rotary_positions(model, offset, int(vllm_config.model_config.max_model_len))
    return offset


class CartridgeQwen3ForCausalLM(Qwen3ForCausalLM):
    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.cartridge_len = _after_cartridge(self, vllm_config)


class CartridgeQwen2ForCausalLM(Qwen2ForCausalLM):
    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.cartridge_len = _after_cartridge(self, vllm_config)


class CartridgeLlamaForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.cartridge_len = _after_cartridge(self, vllm_config)
