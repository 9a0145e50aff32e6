"""Fused cartridge attention: a shared dense KV cartridge plus each request's paged live suffix, one launch.

Public API
----------
CartridgeAttention
    ``plan(...)`` validates and precomputes; ``run(q, ...)`` launches one kernel. ``plan_block_table(...)`` plans
    from a serving engine's block table in place (vLLM), without reading device memory on the host.
write_live_kv
    Writes a step's new live K (BF16) and V (BF16 or FP8 E4M3) into paged caches of any stride, one launch.
reference_attention
    fp32 PyTorch definition the kernel is checked against.
build_injection_layout, build_cascade_layout, split_combined_kv, block_table_to_indptr
    Layout helpers for comparisons with ordinary injection and FlashInfer's cascade.
kernel_identity
    Source / compiler / binary identity for reports.
dispatch.dispatch_table, dispatch.specialization_of
    The dispatch as data: every configuration the default heuristics choose inside an envelope and the inputs
    that choose it; the compiled variant (constexprs and launch options) a plan uses.
UnsupportedLayoutError, UnsupportedArchitectureError
    Raised for anything outside the specialization (there is no fallback).

The qualified envelope is SM90 (H100 / H200). ``cartridge_attn.faults`` holds test-only faulty variants.
"""

from __future__ import annotations

from ._kernel import (
    QUALIFIED_ARCHS,
    SUPPORTED_GROUPS,
    SUPPORTED_HEAD_DIMS,
    SUPPORTED_PAGE_SIZES,
    KernelConfig,
    decode_config,
    prefill_config,
)
from .api import CartridgeAttention, Plan
from .cache_write import write_live_kv
from .errors import (
    CartridgeAttentionError,
    NotPlannedError,
    UnsupportedArchitectureError,
    UnsupportedLayoutError,
)
from .identity import kernel_identity, source_sha256
from .paging import (
    CascadeLayout,
    InjectionLayout,
    block_table_to_indptr,
    build_cascade_layout,
    build_injection_layout,
    live_lengths,
    split_combined_kv,
)
from .problems import AttentionProblem, random_problem
from .reference import reference_attention

__all__ = [
    "QUALIFIED_ARCHS",
    "SUPPORTED_GROUPS",
    "SUPPORTED_HEAD_DIMS",
    "SUPPORTED_PAGE_SIZES",
    "AttentionProblem",
    "CartridgeAttention",
    "CartridgeAttentionError",
    "CascadeLayout",
    "InjectionLayout",
    "KernelConfig",
    "NotPlannedError",
    "Plan",
    "UnsupportedArchitectureError",
    "UnsupportedLayoutError",
    "block_table_to_indptr",
    "build_cascade_layout",
    "build_injection_layout",
    "decode_config",
    "kernel_identity",
    "live_lengths",
    "prefill_config",
    "random_problem",
    "reference_attention",
    "source_sha256",
    "split_combined_kv",
    "write_live_kv",
]
