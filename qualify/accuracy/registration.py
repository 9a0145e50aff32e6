"""Registering the KV-layout model with lm-eval, and building the model a gate's `backend` names.

`hf` runs the suite's own `KVLayoutLM` (fake quantization where the cache is written, any layout, any device).
`vllm` hands the layout to lm-eval's `vllm` backend as vLLM's `kv_cache_dtype`, which sets keys and values
together: only K16/V16 (`auto`) and K8/V8 (`fp8_e4m3`) exist there, so the mixed layouts are refused rather
than silently measured as something else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qualify.errors import QualifyError
from qualify.quant.layouts import Layout

if TYPE_CHECKING:
    from lm_eval.api.model import LM

LM_EVAL_MODEL_NAME = "qualify-kv"
_TARGET = "qualify.accuracy.lm:KVLayoutLM"

VLLM_KV_CACHE_DTYPE: dict[Layout, str] = {Layout.K16_V16: "auto", Layout.K8_V8: "fp8_e4m3"}


def register_lm_eval_model() -> None:
    """Make `qualify-kv` known to lm-eval (`--model qualify-kv`); idempotent, imports nothing heavy.

    The registry holds a lazy "module:class" target, so lm-eval imports the wrapper only when it is used.
    """
    from lm_eval.api.registry import model_registry

    if LM_EVAL_MODEL_NAME not in model_registry:
        model_registry.register(LM_EVAL_MODEL_NAME, target=_TARGET)


def vllm_kv_cache_dtype(layout: Layout | str) -> str:
    layout = Layout.parse(layout)
    try:
        return VLLM_KV_CACHE_DTYPE[layout]
    except KeyError:
        raise QualifyError(
            f"layout {layout} cannot run on vLLM: its kv_cache_dtype quantizes keys and values together "
            f"(supported: {', '.join(str(x) for x in VLLM_KV_CACHE_DTYPE)}); use backend: hf for mixed layouts"
        ) from None


def vllm_model_args(pretrained: str, layout: Layout | str, **extra: Any) -> dict[str, Any]:
    """Arguments for lm-eval's `vllm` model that serve `pretrained` with `layout`'s KV cache."""
    return {"pretrained": pretrained, "kv_cache_dtype": vllm_kv_cache_dtype(layout), **extra}


def build_vllm_lm(pretrained: str, layout: Layout | str, **extra: Any) -> LM:
    """lm-eval's `vllm` model with the layout's `kv_cache_dtype` (needs vLLM and a GPU)."""
    from lm_eval.api.registry import get_model

    return get_model("vllm").create_from_arg_obj(vllm_model_args(pretrained, layout, **extra))
