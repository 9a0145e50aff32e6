"""The serving layouts the engine benchmark and the end-to-end checks run, one fresh process each.

Declared in the order tables show them: the baselines users run (per-request injection, prefix-cached
injection in BF16 and FP8), then vLLM's per-request global FP8, then this project's shared layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from qualify.serve.config import Mode


@dataclass(frozen=True)
class ServingLayout:
    name: str
    mode: Mode
    kv_cache_dtype: str  # vLLM's kv_cache_dtype for the paged cache
    cartridge_value_dtype: Literal["fp8_e4m3", "bfloat16"]
    live_value_dtype: Literal["bfloat16", "fp8_e4m3"]
    description: str
    # inject only: the cartridge's pages are written once by the connector and then shared through vLLM's prefix
    # cache (every request starts with the same placeholder run, so its full blocks hash alike).
    prefix_caching: bool = False


LAYOUTS: dict[str, ServingLayout] = {
    layout.name: layout
    for layout in (
        ServingLayout(
            "bf16-inject",
            Mode.INJECT,
            "auto",
            "bfloat16",
            "bfloat16",
            "ordinary path: BF16 cartridge copied into every request's first pages by the KV connector; vLLM's "
            "FlashAttention (FA3) backend",
        ),
        ServingLayout(
            "bf16-prefix-cached",
            Mode.INJECT,
            "auto",
            "bfloat16",
            "bfloat16",
            "what a knowledgeable user runs today: BF16 cartridge injected once by the KV connector, its full "
            "blocks shared by every request through vLLM's prefix cache (the partial last block copied per "
            "request); vLLM's FlashAttention (FA3) backend",
            prefix_caching=True,
        ),
        ServingLayout(
            "fp8-prefix-cached",
            Mode.INJECT,
            "fp8",
            "bfloat16",
            "bfloat16",
            "bf16-prefix-cached with vLLM's kv_cache_dtype=fp8 (K8/V8 for cartridge and live tokens)",
            prefix_caching=True,
        ),
        ServingLayout(
            "global-fp8",
            Mode.INJECT,
            "fp8",
            "bfloat16",
            "bfloat16",
            "vLLM's own kv_cache_dtype=fp8 (K8/V8 for cartridge and live tokens), cartridge injected per request",
        ),
        ServingLayout(
            "shared-k16v8",
            Mode.SHARED,
            "auto",
            "fp8_e4m3",
            "bfloat16",
            "one shared cartridge outside the paged cache (K BF16, V FP8 per-head scale), fused cartridge_attn "
            "kernel as vLLM's CUSTOM backend, BF16 live pages",
        ),
        ServingLayout(
            "shared-k16v8-live-fp8",
            Mode.SHARED,
            "auto",
            "fp8_e4m3",
            "fp8_e4m3",
            "shared-k16v8 with FP8 E4M3 live V (scale 1) written by the backend into K16/V8 pages (3/4 of the "
            "bytes of a BF16 page, so 4/3 of the tokens fit); live K stays BF16",
        ),
        ServingLayout(
            "shared-k16v16",
            Mode.SHARED,
            "auto",
            "bfloat16",
            "bfloat16",
            "shared cartridge with BF16 V (the kernel's K16/V16 mode): the token-identity check against inject",
        ),
    )
}


def layout(name: str) -> ServingLayout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise KeyError(f"unknown serving layout {name!r}; choices: {', '.join(LAYOUTS)}") from None
