"""`shared` mode: the ``CUSTOM`` attention backend that runs the fused cartridge kernel inside vLLM 0.26.

Per step, the metadata builder plans one `CartridgeAttention` from vLLM's own batch tensors (block table
rows used in place, no host read of device memory); per layer, the impl writes the step's new K and V into
the paged cache (K BF16; V BF16 or FP8 E4M3) and launches the kernel once over the layer's shared cartridge
and the live pages. The cartridge is read once per worker, onto the GPU, outside the paged cache.

CUDA graphs (vLLM's default mode): decode batches are captured whole (``UNIFORM_SINGLE_TOKEN_DECODE``), mixed
and prefill batches piecewise with attention outside the graphs. A replayed graph keeps the pointers and launch
configuration it was captured with, so (1) every tensor a launch reads is one of vLLM's persistent buffers, the
cartridge, or a view of the builder's `DecodeWorkspace`; (2) a decode batch that a graph may serve is planned
for the engine's longest context (``max_model_len``), as vLLM's capture plans it, so the step's plan, and what
the dispatch log records, is the captured variant; (3) the padding requests of a replayed batch (0 queries,
0 live tokens) are planned, each attending the cartridge alone into its own discarded row.

The paged cache keeps vLLM's FlashAttention layout, logical ``(blocks, H_kv, block, D + W)`` in BF16: K in the
first D elements of the last dim, V in the next W. With BF16 live V, W = D; with FP8 live V (K16/V8 pages,
`CartridgeAttentionBackendLiveV8`), W = D / 2: the V part holds D FP8 bytes, a page is 3/4 of a BF16 one and the
cache holds 4/3 of the tokens (`live_pages` gives each attention layer that backend and the matching cache spec).

vLLM runs attention outside the CUDA graphs in a piecewise (prefill or mixed) step, so its host cost per layer
counts there. The impl (one per layer) checks its layer's cache views, cartridge and scales once and keeps them
(`_BoundLayer`); a step then checks only what its plan can change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from cartridge_attn import CartridgeAttention, DecodeWorkspace, LayerOperands
from cartridge_attn.cache_write import LivePages, check_live_pages
from cartridge_attn.dispatch import specialization_of
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)
from vllm.v1.attention.backends.utils import get_kv_cache_layout

from qualify.serve.config import (
    CartridgeServingError,
    Mode,
    checked_serving,
    layer_order,
    live_v_width,
    prefill_impl_for_cache_layout,
)
from qualify.serve.dispatch_log import (
    DIRECT_LAUNCH_NOTE,
    KV_CACHE_LAYOUT_NOTE,
    KV_CACHE_ORDER_NOTE,
    PREFILL_IMPL_NOTE,
    DispatchLog,
)
from qualify.serve.plugin import require_supported_vllm
from qualify.serve.store import LayerCartridge, load_layers

FP8 = torch.float8_e4m3fn


@dataclass
class CartridgeMetadata:
    num_rows: int  # query rows the kernel computes: the scheduled tokens, and a graph's padding requests
    slot_mapping: torch.Tensor
    attn: CartridgeAttention  # planned for this step; every layer runs the same plan
    cartridge: dict[str, LayerCartridge]  # layer name -> its cartridge on the GPU
    live_v_fp8: bool
    direct_launch: bool  # ServingConfig.kernel_launch == "direct"


class CartridgeMetadataBuilder(AttentionMetadataBuilder[CartridgeMetadata]):
    # Whole-graph capture of one-token decode batches; mixed batches run piecewise (attention outside the graph).
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any, device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        require_supported_vllm()
        cfg, facts = checked_serving(vllm_config, Mode.SHARED, "the CUSTOM attention backend of qualify.serve")
        self.cfg, self.facts = cfg, facts
        layers = load_layers(cfg, facts, device, value_dtype=cfg.cartridge_value_dtype)
        names = sorted(layer_names, key=layer_order)
        if len(names) != len(layers):
            raise CartridgeServingError(
                f"cartridge {cfg.path}: {len(layers)} layers for {len(names)} attention layers in this KV cache group"
            )
        self.cartridge = dict(zip(names, layers, strict=True))
        self.cartridge_v_dtype = FP8 if cfg.cartridge_value_dtype == "fp8_e4m3" else torch.bfloat16
        self.live_v_fp8 = cfg.live_value_dtype == "fp8_e4m3"
        want_v = live_v_width(facts.head_dim, cfg.live_value_dtype)
        if getattr(kv_cache_spec, "head_size_v", want_v) != want_v:
            raise CartridgeServingError(
                f"cartridge serving: the KV cache spec gives live V {kv_cache_spec.head_size_v} BF16 elements per "
                f"token and head; live_value_dtype {cfg.live_value_dtype} needs {want_v} (the Cartridge* models set "
                "the pages up; was the architecture overridden?)"
            )
        # A new builder comes with a new KV cache (vLLM's memory profiling first builds a throwaway one): the
        # layers' bindings go now, so that the old cache's memory is not held until their next step.
        layers_by_name = getattr(vllm_config.compilation_config, "static_forward_context", None) or {}
        for name in layer_names:
            impl = getattr(layers_by_name.get(name), "impl", None)
            if isinstance(impl, CartridgeAttentionImpl):
                impl.release_binding()
        self.dispatch_log = DispatchLog()
        cache_layout = get_kv_cache_layout()
        self.prefill_impl = prefill_impl_for_cache_layout(cache_layout)
        # The engine core's parent process cannot ask vLLM which layout this process resolved.
        self.dispatch_log.note(KV_CACHE_LAYOUT_NOTE, cache_layout)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.max_graph_batch = _max_full_graph_batch(vllm_config)
        self.workspace = DecodeWorkspace(
            max_batch=max(int(vllm_config.scheduler_config.max_num_seqs), self.max_graph_batch),
            num_qo_heads=facts.num_qo_heads,
            num_kv_heads=facts.num_kv_heads,
            head_dim=facts.head_dim,
            cartridge_len=cfg.cartridge_len,
            max_live=self.max_model_len,
            device=device,
        )

    def build(
        self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False
    ) -> CartridgeMetadata:
        m = common_attn_metadata
        n = m.num_reqs
        qsl = m.query_start_loc_cpu[: n + 1]
        query_lens = (qsl[1:] - qsl[:-1]).tolist()
        bound = m.seq_lens_cpu_upper_bound
        max_seq_len = int(m.max_seq_len)
        # Read per step: vLLM resolves its CUDA-graph mode for the backends after building them.
        self.max_graph_batch = _max_full_graph_batch(self.vllm_config)
        self.dispatch_log.note("cudagraph_mode", _graph_mode_name(self.vllm_config))
        if n <= self.max_graph_batch and max(query_lens) == 1:
            # A batch a full graph may replay: planned as the capture planned it (see the module docstring).
            max_seq_len = self.max_model_len
        attn = CartridgeAttention(prefill_impl=self.prefill_impl)
        attn.plan_block_table(
            m.query_start_loc,
            query_lens,
            m.seq_lens,
            m.block_table_tensor,
            max_seq_len=max_seq_len,
            seq_lens_bound=bound[:n].tolist() if bound is not None else None,
            num_qo_heads=self.facts.num_qo_heads,
            num_kv_heads=self.facts.num_kv_heads,
            head_dim=self.facts.head_dim,
            page_size=self.facts.block_size,
            cartridge_len=self.cfg.cartridge_len,
            q_dtype=torch.bfloat16,
            cartridge_v_dtype=self.cartridge_v_dtype,
            live_v_dtype=FP8 if self.live_v_fp8 else torch.bfloat16,
            causal=True,
            workspace=self.workspace,
        )
        self.dispatch_log.record(specialization_of(attn.plan_info).key)
        if attn.plan_info.mode == "prefill":  # the only launches whose implementation the cache layout decides
            self.dispatch_log.note(PREFILL_IMPL_NOTE, attn.plan_info.config.impl)
        return CartridgeMetadata(
            num_rows=attn.plan_info.total_q,
            slot_mapping=m.slot_mapping,
            attn=attn,
            cartridge=self.cartridge,
            live_v_fp8=self.live_v_fp8,
            direct_launch=self.cfg.kernel_launch == "direct",
        )


def _graph_mode_name(vllm_config: Any) -> str:
    mode = getattr(vllm_config.compilation_config, "cudagraph_mode", None)
    return str(getattr(mode, "name", mode))


def _max_full_graph_batch(vllm_config: Any) -> int:
    """The largest decode batch a full CUDA graph serves; 0 when the engine captures none (eager, piecewise)."""
    cc = vllm_config.compilation_config
    mode = getattr(cc, "cudagraph_mode", None)
    if mode is None or not mode.has_full_cudagraphs():
        return 0
    return int(cc.max_cudagraph_capture_size or 0)


@dataclass(frozen=True)
class _BoundLayer:
    """One layer's checked operands, valid while the paged cache is the tensor of ``cache_key``."""

    cache_key: tuple
    pages: LivePages
    operands: LayerOperands


def _cache_key(kv_cache: torch.Tensor) -> tuple:
    # The address alone could come back for another cache of another block count once a freed one is reused.
    return (kv_cache.data_ptr(), tuple(kv_cache.shape), kv_cache.stride())


class CartridgeAttentionImpl(AttentionImpl[CartridgeMetadata]):
    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        **extra: Any,
    ) -> None:
        unsupported = {
            "alibi_slopes": alibi_slopes is not None,
            "sliding_window": sliding_window is not None,
            "logits_soft_cap": bool(logits_soft_cap),
            "attn_type": attn_type != AttentionType.DECODER,
            "kv_sharing_target_layer_name": kv_sharing_target_layer_name is not None,
            "sinks": extra.get("sinks") is not None,
        }
        bad = [k for k, v in unsupported.items() if v]
        if bad:
            raise CartridgeServingError(f"the cartridge attention backend does not support {', '.join(bad)}")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype
        self._bound: _BoundLayer | None = None
        self._direct_launch_unseen = True

    def release_binding(self) -> None:
        """Forget the checked operands (and so the views of the cache they hold); the next step checks again."""
        self._bound = None

    def _bind(
        self,
        layer: Any,
        step: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        kv_cache: torch.Tensor,
        md: CartridgeMetadata,
    ) -> _BoundLayer:
        query, key, value, output = step
        d = self.head_size
        pages = kv_cache.transpose(1, 2)  # (blocks, block, H_kv, 2 * D), any physical order
        # The order the kernels actually read, beside the layout vLLM named in the builder: they must agree.
        DispatchLog().note(KV_CACHE_ORDER_NOTE, "HND" if kv_cache.stride(1) > kv_cache.stride(2) else "NHD")
        k_pages = pages[..., :d]
        v_pages = pages[..., d:]
        v_scale = None
        if md.live_v_fp8:
            v_pages = v_pages.view(FP8)[..., :d]
            value_scale = float(getattr(layer, "_v_scale_float", 1.0))
            v_scale = torch.full((self.num_kv_heads,), value_scale, dtype=torch.float32, device=kv_cache.device)
        cart = md.cartridge[layer.layer_name]
        return _BoundLayer(
            cache_key=_cache_key(kv_cache),
            pages=check_live_pages(
                key, value, k_pages, v_pages, md.slot_mapping, v_scale, direct_launch=md.direct_launch
            ),
            operands=md.attn.check_layer(
                cart.k,
                cart.v,
                (k_pages, v_pages),
                cartridge_v_scale=cart.v_scale,
                live_v_scale=v_scale,
                q=query,
                out=output,
                direct_launch=md.direct_launch,
            ),
        )

    def forward(
        self,
        layer: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: CartridgeMetadata,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise CartridgeServingError("the cartridge attention backend does not fuse output quantization")
        if attn_metadata is None:  # profiling run
            return output.fill_(0)
        md = attn_metadata
        n = md.num_rows
        bound = self._bound
        if bound is None or bound.cache_key != _cache_key(kv_cache):
            bound = self._bound = self._bind(layer, (query, key, value, output), kv_cache, md)
        bound.pages.write(key, value, md.slot_mapping[:n])
        md.attn.run_layer(query[:n], bound.operands, output[:n])
        if self._direct_launch_unseen and md.direct_launch:
            self._note_direct_launch(bound)
        return output

    def _note_direct_launch(self, bound: _BoundLayer) -> None:
        # A run with direct launches on must show that some happened: otherwise a comparison with the JIT path
        # would compare the JIT path with itself.
        ops = bound.operands
        if any(x is not None and x.direct_launches for x in (ops.launches, ops.cascade_launches, ops.gluon_launches)):
            self._direct_launch_unseen = False
            DispatchLog().note(DIRECT_LAUNCH_NOTE, "seen")


class CartridgeAttentionBackend(AttentionBackend):
    """Registered as ``AttentionBackendEnum.CUSTOM`` by qualify.serve.plugin."""

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "bfloat16"]
    forward_includes_kv_cache_update: bool = True

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_supported_kernel_block_sizes() -> list[int]:
        return [8, 16]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return [64, 128]

    @staticmethod
    def get_impl_cls() -> type[CartridgeAttentionImpl]:
        return CartridgeAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[CartridgeMetadataBuilder]:
        return CartridgeMetadataBuilder

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int, block_size: int, num_kv_heads: int, head_size: int, cache_dtype_str: str = "auto"
    ) -> tuple[int, ...]:
        return (num_blocks, num_kv_heads, block_size, 2 * head_size)

    @staticmethod
    def get_kv_cache_stride_order(include_num_layers_dimension: bool = False) -> tuple[int, ...]:
        nhd = get_kv_cache_layout() == "NHD"
        if include_num_layers_dimension:
            return (1, 0, 3, 2, 4) if nhd else (1, 2, 0, 3, 4)
        return (0, 2, 1, 3) if nhd else (0, 1, 2, 3)

    @staticmethod
    def use_cascade_attention(*args: Any, **kwargs: Any) -> bool:
        return False

    @classmethod
    def supports_compute_capability(cls, capability: Any) -> bool:
        return getattr(capability, "major", None) == 9


class CartridgeAttentionBackendLiveV8(CartridgeAttentionBackend):
    """The shared backend over K16/V8 live pages: V takes D FP8 bytes, the room of D / 2 BF16 elements."""

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int, block_size: int, num_kv_heads: int, head_size: int, cache_dtype_str: str = "auto"
    ) -> tuple[int, ...]:
        return (num_blocks, num_kv_heads, block_size, head_size + live_v_width(head_size, "fp8_e4m3"))
