"""Shared mode: models whose token positions start after the cartridge.

The shared cartridge occupies positions ``0 .. cartridge_len - 1`` outside the paged cache, so a request's
prompt carries only its own tokens, and vLLM numbers them from 0. These subclasses rotate position ``p`` as
``p + cartridge_len`` (`rope_shift`: each layer's rotary table starts at the offset), which is all that differs
from the stock model; ``forward`` is vLLM's own, so torch.compile and CUDA graphs see the stock graph. With FP8 live
V, the attention layers get K16/V8 pages (`live_pages`).
Registered through ``ModelRegistry`` by `plugin.register`; selected with ``hf_overrides={"architectures": [...]}``.
"""

from __future__ import annotations

from typing import Any

from vllm.model_executor.models.llama import LlamaForCausalLM
from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM
from vllm.model_executor.models.qwen3 import Qwen3ForCausalLM

from qualify.serve.config import Mode, checked_serving
from qualify.serve.live_pages import use_k16v8_pages
from qualify.serve.plugin import require_supported_vllm
from qualify.serve.rope_shift import shift_rotary_positions


def _after_cartridge(model: Any, vllm_config: Any) -> int:
    require_supported_vllm()
    cfg, _ = checked_serving(vllm_config, Mode.SHARED, "the Cartridge* architectures (positions after the cartridge)")
    shift_rotary_positions(model, cfg.cartridge_len, int(vllm_config.model_config.max_model_len))
    if cfg.live_value_dtype == "fp8_e4m3":
        use_k16v8_pages(model)
    return cfg.cartridge_len


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
