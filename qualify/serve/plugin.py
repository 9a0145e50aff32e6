"""The ``vllm.general_plugins`` entry point: the shared-mode attention backend, models and seeded loader.

vLLM calls `register` in every process it starts (engine core, workers), before models are built. On a vLLM
other than 0.26.x it registers nothing and logs why; the cartridge modules then refuse to start with the
same message (`require_supported_vllm`), so an unsupported vLLM is never served a cartridge, while other
uses of that vLLM are left alone.
"""

from __future__ import annotations

import logging

from qualify.serve.config import BACKEND_CLASS, SHARED_ARCHITECTURES, check_vllm_version

log = logging.getLogger(__name__)


def require_supported_vllm() -> None:
    import vllm

    check_vllm_version(vllm.__version__)


def register() -> None:
    import vllm

    try:
        check_vllm_version(vllm.__version__)
    except Exception as exc:
        log.error("qualify.serve not registered: %s", exc)
        return
    from vllm import ModelRegistry
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CUSTOM, BACKEND_CLASS)
    import qualify.serve.loader  # noqa: F401  (registers load_format="qualify_seeded")

    supported = set(ModelRegistry.get_supported_archs())
    for wrapped in SHARED_ARCHITECTURES.values():
        if wrapped not in supported:
            ModelRegistry.register_model(wrapped, f"qualify.serve.model:{wrapped}")
