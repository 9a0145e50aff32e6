"""`inject` mode: a vLLM v1 KV connector that copies the BF16 cartridge into each request's first pages.

The ordinary way to serve a cartridge: every request carries its own copy. A prompt that starts with
``cartridge_len`` placeholder tokens gets those positions reported as already computed (no prefill over
them); before the step that first schedules it, the worker copies the cartridge into the request's slots
for every layer. Prompts without the placeholder run are served without a cartridge; a prompt that starts
with only part of the run is refused (it would silently attend over placeholder embeddings).

Registered by module path: ``kv_transfer_config={"kv_connector": "CartridgeInjectConnector",
"kv_connector_module_path": "qualify.serve.connector", "kv_role": "kv_both"}`` (see config.engine_kwargs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from qualify.serve.config import CartridgeServingError, Mode, checked_serving, layer_order
from qualify.serve.dispatch_log import CACHED_EVENT, DispatchLog
from qualify.serve.plugin import require_supported_vllm
from qualify.serve.store import LayerCartridge, load_layers

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request


@dataclass
class _Load:
    req_id: str
    block_ids: list[int]
    start: int  # first cartridge position to write (a prefix cache hit may already hold earlier ones)
    end: int


@dataclass
class CartridgeInjectMetadata(KVConnectorMetadata):
    loads: list[_Load] = field(default_factory=list)


class CartridgeInjectConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig | None = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        require_supported_vllm()
        self._cfg, self._facts = checked_serving(vllm_config, Mode.INJECT, "CartridgeInjectConnector")
        self._block_size = self._facts.block_size
        self._pending: list[_Load] = []
        self._log = DispatchLog()  # a measurement reads which cartridge positions the prefix cache served
        self._kv: dict[str, torch.Tensor] = {}
        self._layers: list[LayerCartridge] | None = None
        self._layer_of: dict[str, int] = {}

    # ---------------------------------------------------------------- scheduler side
    def _placeholder_run(self, tokens: Any) -> int:
        n, pid = self._cfg.cartridge_len, self._cfg.placeholder_token_id
        run = 0
        for t in tokens[:n]:
            if t != pid:
                break
            run += 1
        return run

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int, bool]:
        tokens = request.prompt_token_ids or []
        run = self._placeholder_run(tokens)
        n = self._cfg.cartridge_len
        if run == 0:
            return 0, False
        if run < n or len(tokens) <= n:
            raise CartridgeServingError(
                f"request {request.request_id}: its prompt starts with {run} placeholder tokens "
                f"(id {self._cfg.placeholder_token_id}) and has {len(tokens)} tokens; a cartridge prompt is "
                f"exactly {n} placeholders followed by at least one real token"
            )
        # num_computed_tokens: what vLLM's own prefix cache already holds of this prompt (whole blocks).
        self._log.event(CACHED_EVENT, str(min(num_computed_tokens, n)))
        return max(0, n - num_computed_tokens), False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        if num_external_tokens <= 0:
            return
        end = self._cfg.cartridge_len
        block_ids = list(blocks.get_block_ids()[0])
        self._pending.append(_Load(request.request_id, block_ids, end - num_external_tokens, end))

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = CartridgeInjectMetadata(loads=self._pending)
        self._pending = []
        return meta

    # ---------------------------------------------------------------- worker side
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._kv = dict(kv_caches)
        names = sorted(self._kv, key=layer_order)
        self._layer_of = {name: i for i, name in enumerate(names)}
        device = next(iter(self._kv.values())).device
        self._layers = load_layers(self._cfg, self._facts, device, value_dtype="bfloat16")

    def _split(self, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # vLLM 0.26 FlashAttention layout: logical (num_blocks, H_kv, block, 2 * D), K then V along the last dim.
        d, h = self._facts.head_dim, self._facts.num_kv_heads
        if kv.dim() != 4 or kv.shape[1] != h or kv.shape[-1] != 2 * d:
            raise CartridgeServingError(
                f"inject connector: KV cache of shape {tuple(kv.shape)} is not the (blocks, {h}, block, {2 * d}) "
                "layout of vLLM 0.26's FlashAttention backend"
            )
        k, v = kv.transpose(1, 2).split(d, dim=-1)
        if kv.dtype == torch.uint8:
            k, v = k.view(torch.float8_e4m3fn), v.view(torch.float8_e4m3fn)
        return k, v

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, CartridgeInjectMetadata)
        if not meta.loads:
            return
        if self._layers is None:
            # Requests were told their cartridge positions are computed: serving them without the copy would
            # attend over unwritten pages.
            raise CartridgeServingError(
                "inject connector: cartridge loads scheduled before any KV cache was registered"
            )
        bs = self._block_size
        device = next(iter(self._kv.values())).device
        blocks, offsets, positions = [], [], []
        for load in meta.loads:
            pos = torch.arange(load.start, load.end)
            ids = torch.tensor(load.block_ids, dtype=torch.int64)
            blocks.append(ids[pos // bs])
            offsets.append(pos % bs)
            positions.append(pos)
        blk = torch.cat(blocks).to(device, non_blocking=True)
        off = torch.cat(offsets).to(device, non_blocking=True)
        pos = torch.cat(positions).to(device, non_blocking=True)
        layers = forward_context.no_compile_layers
        for name, kv in self._kv.items():
            cart = self._layers[self._layer_of[name]]
            k_cache, v_cache = self._split(kv)
            k_src, v_src = cart.k[pos], cart.v[pos]
            if k_cache.dtype == torch.float8_e4m3fn:
                layer = layers.get(name)
                k_scale = float(getattr(layer, "_k_scale_float", 1.0))
                v_scale = float(getattr(layer, "_v_scale_float", 1.0))
                k_src = (k_src.float() / k_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
                v_src = (v_src.float() / v_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
            k_cache[blk, off] = k_src.to(k_cache.dtype)
            v_cache[blk, off] = v_src.to(v_cache.dtype)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # start_load_kv copies synchronously on the forward stream

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        return  # nothing is saved: the cartridge is read-only

    def wait_for_save(self) -> None:
        return
