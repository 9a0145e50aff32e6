"""Fused cartridge attention: a shared dense KV cartridge plus each request's paged live suffix, one launch.

Public API
----------
CartridgeAttention
    ``plan(...)`` validates and precomputes; ``run(q, ...)`` launches one kernel. ``plan_block_table(...)`` plans
    from a serving engine's block table in place (vLLM), without reading device memory on the host.
default_prefill_impl
    The prefill kernel a wrapper launches on a device unless told otherwise: the Gluon one on SM90 with Triton
    3.6, the Triton one elsewhere.
DecodeWorkspace
    Buffers allocated once per engine that plans take views of, so that CUDA graphs over ``run`` replay.
write_live_kv
    Writes a step's new live K (BF16) and V (BF16 or FP8 E4M3) into paged caches of any stride, one launch.
reference_attention
    fp32 PyTorch definition the kernel is checked against.
build_injection_layout, build_cascade_layout, shared_page_table, split_combined_kv, block_table_to_indptr
    Layout helpers for comparisons with ordinary injection, FlashInfer's cascade and prefix-cached shared pages.
kernel_identity
    Source / compiler / binary identity for reports.
dispatch.dispatch_table, dispatch.specialization_of
    The dispatch as data: every configuration the default heuristics choose inside an envelope and the inputs
    that choose it; the compiled variant (constexprs and launch options) a plan uses.
UnsupportedLayoutError, UnsupportedArchitectureError
    Raised for anything outside the specialization (there is no fallback).

The qualified envelope is SM90 (H100 / H200). Deliberately wrong variants are not part of it: they are
source edits applied to a copy of this package (``mutation/cartridge_attn.yaml``, ``qualify mutants``).

Names are imported on first use: ``cartridge_attn.heuristics`` and ``cartridge_attn.dispatch`` (configurations,
the dispatch table) need neither torch nor triton, so tools that only plan or list cells stay light, and the
Triton interpreter can still be chosen before the kernel module is first imported.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# name -> the submodule that defines it
_EXPORTS = {
    "QUALIFIED_ARCHS": "heuristics",
    "SUPPORTED_GROUPS": "heuristics",
    "SUPPORTED_HEAD_DIMS": "heuristics",
    "SUPPORTED_PAGE_SIZES": "heuristics",
    "KernelConfig": "heuristics",
    "decode_config": "heuristics",
    "prefill_config": "heuristics",
    "CartridgeAttention": "api",
    "Plan": "api",
    "LayerOperands": "api",
    "default_prefill_impl": "api",
    "DecodeWorkspace": "workspace",
    "write_live_kv": "cache_write",
    "LivePages": "cache_write",
    "check_live_pages": "cache_write",
    "CartridgeAttentionError": "errors",
    "NotPlannedError": "errors",
    "UnsupportedArchitectureError": "errors",
    "UnsupportedLayoutError": "errors",
    "kernel_identity": "identity",
    "source_sha256": "identity",
    "CascadeLayout": "paging",
    "InjectionLayout": "paging",
    "block_table_to_indptr": "paging",
    "build_cascade_layout": "paging",
    "build_injection_layout": "paging",
    "live_lengths": "paging",
    "shared_page_table": "paging",
    "split_combined_kv": "paging",
    "AttentionProblem": "problems",
    "poison_cascade_states": "problems",
    "random_problem": "problems",
    "reference_attention": "reference",
}
__all__ = [
    "QUALIFIED_ARCHS",
    "SUPPORTED_GROUPS",
    "SUPPORTED_HEAD_DIMS",
    "SUPPORTED_PAGE_SIZES",
    "AttentionProblem",
    "CartridgeAttention",
    "CartridgeAttentionError",
    "CascadeLayout",
    "DecodeWorkspace",
    "InjectionLayout",
    "KernelConfig",
    "LayerOperands",
    "LivePages",
    "NotPlannedError",
    "Plan",
    "UnsupportedArchitectureError",
    "UnsupportedLayoutError",
    "block_table_to_indptr",
    "build_cascade_layout",
    "build_injection_layout",
    "check_live_pages",
    "decode_config",
    "default_prefill_impl",
    "kernel_identity",
    "live_lengths",
    "poison_cascade_states",
    "prefill_config",
    "random_problem",
    "reference_attention",
    "shared_page_table",
    "source_sha256",
    "split_combined_kv",
    "write_live_kv",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
