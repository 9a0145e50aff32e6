"""Registering the KV-layout model with lm-eval, and building the model a gate's `backend` names.

`hf` runs the suite's own `KVLayoutLM` (fake quantization where the cache is written, any layout, any device).
`vllm` hands the layout to lm-eval's `vllm` backend as vLLM's `kv_cache_dtype`, which sets keys and values
together: only K16/V16 (`auto`) and K8/V8 (`fp8_e4m3`) exist there, so the mixed layouts are refused rather
than silently measured as something else.
"""

from __future__ import annotations

import contextlib
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
    # lm-eval fills its model registry on first use only while the registry is empty: once `qualify-kv` is in
    # it, "vllm" would be unknown unless lm-eval's own entries were registered first.
    import lm_eval.models  # noqa: F401
    from lm_eval.api.registry import get_model

    return get_model("vllm").create_from_arg_obj(vllm_model_args(pretrained, layout, **extra))


def release_vllm_lm(lm: object) -> None:
    """Shut down the engine behind lm-eval's `vllm` model and free its GPU memory, so the next one can start.

    vLLM supports one engine per process; its own tests start a second one after `cleanup_dist_env_and_memory`
    (tears down the process group and empties the CUDA cache). Every step is best effort: a vLLM version that
    lacks one still gets the others.
    """
    import gc

    llm = getattr(lm, "model", None)
    shutdown = _path(llm, "llm_engine.engine_core.shutdown")
    if callable(shutdown):
        with contextlib.suppress(Exception):
            shutdown()
    with contextlib.suppress(AttributeError):
        del lm.model  # type: ignore[attr-defined]
    del llm
    gc.collect()
    with contextlib.suppress(Exception):
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()


def _path(obj: object, dotted: str) -> Any:
    for name in dotted.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _text(value: object) -> str | None:
    """An engine setting as plain text: enum members by value, torch dtypes without the `torch.` prefix."""
    if value is None:
        return None
    return str(getattr(value, "value", value)).removeprefix("torch.")


def vllm_engine_facts(lm: object) -> dict[str, Any]:
    """What the engine behind lm-eval's `vllm` model says about its KV cache, read back after it started.

    `engine_cache_dtype` is vLLM's own `cache_config.cache_dtype`; `num_gpu_blocks` x `block_size` is the KV
    capacity in tokens (an FP8 cache holds about twice the tokens of a 16-bit one in the same memory). Fields
    this vLLM version does not expose are None.
    """
    engine = _path(lm, "model.llm_engine")
    config = _path(engine, "vllm_config")
    cache = _path(config, "cache_config")
    blocks, block_size = _path(cache, "num_gpu_blocks"), _path(cache, "block_size")
    sized = isinstance(blocks, int) and isinstance(block_size, int)
    return {
        "engine_cache_dtype": _text(_path(cache, "cache_dtype")),
        "num_gpu_blocks": blocks,
        "block_size": block_size,
        "kv_capacity_tokens": blocks * block_size if sized else None,
        "model_dtype": _text(_path(config, "model_config.dtype") or _path(engine, "model_config.dtype")),
        "load_format": _text(_path(config, "load_config.load_format")),
    }


def check_vllm_kv_cache(layout: Layout | str, facts: dict[str, Any]) -> None:
    """Raise if the engine reports a KV cache dtype other than the one the layout asked for.

    K8/V8 must come back as an FP8 cache dtype; K16/V16 as `auto` or a 16-bit dtype. An engine that does not
    report its cache dtype passes (its facts say None, and the report shows that).
    """
    layout = Layout.parse(layout)
    seen = facts.get("engine_cache_dtype")
    if seen is None:
        return
    wanted = vllm_kv_cache_dtype(layout)
    ok = "fp8" in seen if wanted.startswith("fp8") else seen in {"auto", "bfloat16", "float16", "half"}
    if not ok:
        raise QualifyError(
            f"layout {layout}: asked vLLM for kv_cache_dtype {wanted!r}, the engine reports {seen!r}; "
            "the layout did not reach the KV cache"
        )
