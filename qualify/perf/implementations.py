"""The one table of implementations the perf gate can compare, grouped into *sets*.

A set groups implementations measured the same way by one `measure` function in a worker process:
`kernel` (attention kernels, one decode step = num_layers attention calls), `engine` (vLLM serving a
cartridge, one fresh process per layout: qualify.perf.engine_set) and `serving` (the same layouts serving a
request stream with equal KV memory: qualify.perf.serving_set). The gate kind is the same for all.
Each implementation names everything the rest of the package needs to know about it: the metrics it supports,
the builder that sets it up in the worker, and the bytes it moves (`bytes_model`). Nothing else declares
implementation names. Declarations only: nothing here imports torch (builders are imported in the worker).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from qualify.perf.bytes_model import Layout
from qualify.perf.metrics import METRICS
from qualify.serve.layouts import LAYOUTS

RELEASE = "release"  # a gate's `baseline` naming the same candidate in the baseline signed report


@dataclass(frozen=True)
class Implementation:
    """One implementation. `builder` ("module:function") and `bytes` are set where the set's `measure` needs them
    (the kernel set); an engine implementation is built from the serving layout of the same name instead."""

    name: str
    description: str
    metrics: frozenset[str]
    builder: str | None = None  # "module:function" taking a CellSpec, returning a Built; imported in the worker
    bytes: Layout | None = None  # how it holds K and V, for the bytes it moves per step (bytes_model)


@dataclass(frozen=True)
class ImplementationSet:
    name: str
    description: str
    measure: str  # "module:function" taking a WorkRequest, returning a WorkResult; imported in the worker
    implementations: tuple[Implementation, ...]

    def get(self, name: str) -> Implementation:
        for impl in self.implementations:
            if impl.name == name:
                return impl
        known = ", ".join(i.name for i in self.implementations)
        raise KeyError(f"implementation set {self.name!r} has no implementation {name!r}; choices: {known}")

    def names(self) -> list[str]:
        return [i.name for i in self.implementations]


class ImplementationRegistry:
    def __init__(self) -> None:
        self._sets: dict[str, ImplementationSet] = {}

    def register(self, impl_set: ImplementationSet) -> None:
        if impl_set.name in self._sets:
            raise ValueError(f"implementation set {impl_set.name!r} is registered twice")
        names = [i.name for i in impl_set.implementations]
        if not names:
            raise ValueError(f"implementation set {impl_set.name!r} has no implementations")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"implementation set {impl_set.name!r} names {dupes} twice")
        if RELEASE in names:
            raise ValueError(f"{RELEASE!r} is reserved for the release baseline, not an implementation name")
        for impl in impl_set.implementations:
            unknown = sorted(impl.metrics - set(METRICS))
            if unknown:
                raise ValueError(f"implementation {impl.name!r} declares unknown metrics {unknown}")
        self._sets[impl_set.name] = impl_set

    def get_set(self, name: str) -> ImplementationSet:
        try:
            return self._sets[name]
        except KeyError:
            raise KeyError(f"unknown implementation set {name!r}; choices: {', '.join(sorted(self._sets))}") from None

    def __iter__(self) -> Iterator[ImplementationSet]:
        return iter(self._sets[n] for n in sorted(self._sets))


_BOTH = frozenset({"decode_tokens_per_s", "ttft_proxy_ms"})
_KERNELS = "qualify.perf.kernel_set"
# Element bytes of (cartridge K, cartridge V, live K, live V); whether one cartridge copy serves every request;
# whether TTFT includes writing the cartridge into each new request's pages.
_SHARED_K16V8 = Layout(2, 1, 2, 2, shared_cartridge=True, copies_cartridge_for_prefill=False)
_SHARED_BF16 = Layout(2, 2, 2, 2, shared_cartridge=True, copies_cartridge_for_prefill=False)
_INJECTED_BF16 = Layout(2, 2, 2, 2, shared_cartridge=False, copies_cartridge_for_prefill=True)
_INJECTED_FP8 = Layout(1, 1, 1, 1, shared_cartridge=False, copies_cartridge_for_prefill=True)

KERNEL_SET = ImplementationSet(
    name="kernel",
    description="attention kernels on the cartridge + paged live-suffix layout (one process per implementation)",
    measure=f"{_KERNELS}:measure",
    implementations=(
        Implementation(
            "fused-k16v8",
            "this project's fused kernel over a shared cartridge (K BF16, V FP8 E4M3 per-head scales) as it ships: "
            "the dispatch's prefill on this GPU (the Gluon kernel on SM90 with Triton 3.6, else the Triton one)",
            _BOTH,
            builder=f"{_KERNELS}:build_fused_k16v8",
            bytes=_SHARED_K16V8,
        ),
        Implementation(
            "fused-k16v16",
            "the same fused kernel with a BF16 cartridge V (separates the dtype effect from the fusion effect)",
            _BOTH,
            builder=f"{_KERNELS}:build_fused_k16v16",
            bytes=_SHARED_BF16,
        ),
        Implementation(
            "fused-k16v8-triton",
            "the same K16/V8 prefill by the Triton kernel, named: the dispatch's off SM90 / Triton 3.6, and the "
            "baseline the Gluon prefill replaced (prefill only)",
            frozenset({"ttft_proxy_ms"}),
            builder=f"{_KERNELS}:build_fused_k16v8_triton",
            bytes=_SHARED_K16V8,
        ),
        Implementation(
            "fused-k16v8-gluon",
            "the same K16/V8 prefill by the warp-specialized Gluon kernel, named (TMA producer warp, two consumer "
            "warpgroups; prefill only, Triton 3.6)",
            frozenset({"ttft_proxy_ms"}),
            builder=f"{_KERNELS}:build_fused_k16v8_gluon",
            bytes=_SHARED_K16V8,
        ),
        Implementation(
            "fused-k16v16-gluon",
            "the Gluon prefill with a BF16 cartridge V: beside fused-k16v8-gluon (an FP8 cartridge, read as its FP16 "
            "expansion) it shows what the FP8 cartridge still costs the prefill (prefill only, Triton 3.6)",
            frozenset({"ttft_proxy_ms"}),
            builder=f"{_KERNELS}:build_fused_k16v16_gluon",
            bytes=_SHARED_BF16,
        ),
        Implementation(
            "fused-k16v8-cascade",
            "the same K16/V8 decode as a cascade: every request's rows over the cartridge in wide row tiles, then the "
            "fused kernel over the live pages beside it, merging its states at the end (two launches, the second a "
            "programmatic dependent of the first; decode only)",
            frozenset({"decode_tokens_per_s"}),
            builder=f"{_KERNELS}:build_fused_k16v8_cascade",
            bytes=_SHARED_K16V8,
        ),
        Implementation(
            "flashinfer-inject-bf16",
            "ordinary injection: the BF16 cartridge copied into every request's pages, FlashInfer paged decode "
            "and FA3 paged prefill (TTFT includes the copy)",
            _BOTH,
            builder=f"{_KERNELS}:build_inject_bf16",
            bytes=_INJECTED_BF16,
        ),
        Implementation(
            "flashinfer-inject-fp8",
            "injection with global FP8 E4M3 K and V, FlashInfer paged decode (decode only: FlashInfer's FP8 "
            "paged prefill is a separate JIT module this version does not build)",
            frozenset({"decode_tokens_per_s"}),
            builder=f"{_KERNELS}:build_inject_fp8",
            bytes=_INJECTED_FP8,
        ),
        Implementation(
            "flashinfer-shared-pages-bf16",
            "what prefix caching gives: every request's page list starts at one shared copy of the BF16 cartridge "
            "pages, FlashInfer paged decode and FA3 paged prefill (no copy)",
            _BOTH,
            builder=f"{_KERNELS}:build_shared_pages_bf16",
            bytes=_SHARED_BF16,
        ),
        Implementation(
            "fa3-shared-pages-bf16",
            "vLLM's own path with prefix caching: vLLM 0.26's FlashAttention-3 called as its FLASH_ATTN backend "
            "calls it (16-token blocks, every request's block table starting with the same cartridge blocks, "
            "scheduler metadata planned ahead, num_splits as vLLM's default graph mode sets it); needs vLLM",
            _BOTH,
            builder="qualify.perf.fa3_shared:build_fa3_shared_pages_bf16",
            bytes=_SHARED_BF16,
        ),
        Implementation(
            "flashinfer-cascade-bf16",
            "FlashInfer MultiLevelCascadeAttentionWrapper: one shared cartridge level + per-request level, merged",
            _BOTH,
            builder=f"{_KERNELS}:build_cascade_bf16",
            bytes=_SHARED_BF16,
        ),
    ),
)


_ENGINE_METRICS = frozenset({"output_tokens_per_s", "ttft_p50_ms", "ttft_p95_ms"})


def _one_per_layout(metrics: frozenset[str]) -> tuple[Implementation, ...]:
    return tuple(Implementation(layout.name, layout.description, metrics) for layout in LAYOUTS.values())


# One implementation per serving layout (qualify.serve.layouts, which imports nothing heavy either): the engine
# set's measure builds each from its layout, so the names and descriptions are read from there.
ENGINE_SET = ImplementationSet(
    name="engine",
    description="vLLM 0.26 serving a cartridge end to end (one fresh process per layout; output tok/s and TTFT)",
    measure="qualify.perf.engine_set:measure",
    implementations=_one_per_layout(_ENGINE_METRICS),
)


_SERVING_METRICS = frozenset(name for name, m in METRICS.items() if m.phase == "serving")

# The same layouts serving a request stream with equal KV memory (qualify.perf.serving_set).
SERVING_SET = ImplementationSet(
    name="serving",
    description="vLLM 0.26 serving a request stream with the same KV memory for every layout (completed req/s, ITL)",
    measure="qualify.perf.serving_set:measure",
    implementations=_one_per_layout(_SERVING_METRICS),
)


def default_implementations() -> ImplementationRegistry:
    """A fresh registry of the built-in implementation sets (built per call: no module-level state)."""
    registry = ImplementationRegistry()
    registry.register(KERNEL_SET)
    registry.register(ENGINE_SET)
    registry.register(SERVING_SET)
    return registry


def load_ref(ref: str) -> Any:
    """Import what a "module:function" reference (a set's `measure`, an implementation's `builder`) names."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise ValueError(f"expected 'module:function', got {ref!r}")
    return getattr(importlib.import_module(module_name), attr)
