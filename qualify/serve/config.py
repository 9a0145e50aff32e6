"""What an engine serving a cartridge is asked to do, the engine arguments for it, and the guards.

Nothing here imports vLLM: the checks take plain facts about the engine (`EngineFacts`) so that they are
tested on any machine, and the vLLM-side modules call them with facts read from ``VllmConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from qualify.errors import QualifyError

SUPPORTED_VLLM = "0.26"
ADDITIONAL_CONFIG_KEY = "cartridge"  # VllmConfig.additional_config["cartridge"] holds a ServingConfig
CONNECTOR_CLASS = "CartridgeInjectConnector"
CONNECTOR_MODULE = "qualify.serve.connector"
BACKEND_CLASS = "qualify.serve.backend.CartridgeAttentionBackend"
# Architectures whose positions the shared mode offsets by the cartridge length (model.py defines them).
SHARED_ARCHITECTURES: dict[str, str] = {
    "Qwen3ForCausalLM": "CartridgeQwen3ForCausalLM",
    "Qwen2ForCausalLM": "CartridgeQwen2ForCausalLM",
    "LlamaForCausalLM": "CartridgeLlamaForCausalLM",
}
KERNEL_PAGE_SIZES = (16, 8)  # cartridge_attn's page sizes, preferred first


# How the fused backend launches its kernels: Triton's JIT path, or a variant a layer launched before through its
# compiled launcher (cartridge_attn.launch). Direct is the default since it ran on the H200 with outputs bit-identical
# to the JIT path's, in graph-mode serving too (results/2026-12-02-direct-launch-h200).
KernelLaunch = Literal["triton", "direct"]
KERNEL_LAUNCHES: tuple[str, ...] = get_args(KernelLaunch)
DEFAULT_KERNEL_LAUNCH: KernelLaunch = "direct"


def live_v_width(head_dim: int, live_value_dtype: str) -> int:
    """BF16 elements a live page gives one token's V per KV head: D, or D / 2 for FP8 V (D bytes), so that a K16/V8
    page holds 3/4 of the bytes of a BF16 one and the cache 4/3 of the tokens."""
    return head_dim // 2 if live_value_dtype == "fp8_e4m3" else head_dim


# vLLM's two paged KV cache layouts (get_kv_cache_layout) and the variable a user picks one with (NHD when unset).
KVCacheLayout = Literal["NHD", "HND"]
KV_CACHE_LAYOUTS: tuple[str, ...] = get_args(KVCacheLayout)
VLLM_KV_CACHE_LAYOUT_ENV = "VLLM_KV_CACHE_LAYOUT"


def prefill_impl_for_cache_layout(layout: KVCacheLayout) -> str | None:
    """The prefill the backend's wrappers name over vLLM's KV cache `layout`: None (the dispatch's: the Gluon prefill
    on SM90 with Triton 3.6) for NHD, whose token rows hold every head's K and V side by side, so that a head is a
    column range the Gluon prefill's TMA boxes read; the Triton prefill for HND, whose heads are a page of rows
    apart, which those boxes cannot address."""
    return None if layout == "NHD" else "triton"


class CartridgeServingError(QualifyError):
    """An engine configuration that cannot serve the cartridge correctly (raised before anything is served)."""


class Mode(StrEnum):
    INJECT = "inject"
    SHARED = "shared"


class ServingConfig(BaseModel):
    """One cartridge served by one engine (``additional_config={"cartridge": {...}}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode
    path: str = Field(description="cartridge file (.safetensors or .pt, see qualify.cartridge.io)")
    cartridge_len: int = Field(ge=1, description="positions in the cartridge; checked against the file")
    placeholder_token_id: int = Field(
        default=0, ge=0, description="inject: prompts start with cartridge_len copies of this token id"
    )
    cartridge_value_dtype: Literal["fp8_e4m3", "bfloat16"] = Field(
        default="fp8_e4m3", description="shared: the cartridge V dtype (keys stay BF16)"
    )
    live_value_dtype: Literal["bfloat16", "fp8_e4m3"] = Field(
        default="bfloat16",
        description="shared: the live (paged) V dtype; FP8 uses per-layer scale 1 and pages sized for it (K16/V8)",
    )
    kernel_launch: KernelLaunch = Field(
        default=DEFAULT_KERNEL_LAUNCH,
        description="shared: 'direct' launches a kernel variant a layer launched before through its compiled "
        "launcher, without Triton's per-call binding (cartridge_attn.launch); 'triton' through Triton's JIT path",
    )


def check_vllm_version(version: str) -> None:
    """Refuse any vLLM but 0.26.x: the connector and backend interfaces used here are not stable APIs."""
    parts = version.split(".")
    if ".".join(parts[:2]) != SUPPORTED_VLLM:
        raise CartridgeServingError(
            f"cartridge serving targets vLLM {SUPPORTED_VLLM}.x (KV connector v1 and attention backend "
            f"interfaces of that release); this environment has vLLM {version}. Install vllm>=0.26,<0.27."
        )


def serving_config(additional_config: Any) -> ServingConfig | None:
    """The engine's ServingConfig, or None when it serves no cartridge. More than one is refused."""
    if not isinstance(additional_config, dict) or ADDITIONAL_CONFIG_KEY not in additional_config:
        return None
    raw = additional_config[ADDITIONAL_CONFIG_KEY]
    if isinstance(raw, (list, tuple)):
        raise CartridgeServingError(
            f"additional_config.{ADDITIONAL_CONFIG_KEY}: one cartridge per engine, got a list of {len(raw)}"
        )
    if not isinstance(raw, dict):
        raise CartridgeServingError(f"additional_config.{ADDITIONAL_CONFIG_KEY}: a mapping, got {type(raw).__name__}")
    try:
        return ServingConfig.model_validate(raw)
    except ValueError as exc:
        raise CartridgeServingError(f"additional_config.{ADDITIONAL_CONFIG_KEY}: {exc}") from None


@dataclass(frozen=True)
class EngineFacts:
    """What the guards need to know about an engine, read from its VllmConfig."""

    architectures: tuple[str, ...]
    num_layers: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    kv_cache_dtype: str
    model_dtype: str
    speculative: bool
    prefix_caching: bool
    cascade_attn: bool  # True unless the engine disables cascade attention
    attention_backend: str | None
    kv_connector: str | None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1


@dataclass(frozen=True)
class RankHeads:
    """The attention heads one tensor-parallel rank holds, split as vLLM's QKVParallelLinear splits them: the
    query heads evenly; the KV heads evenly when there are at least as many as ranks, else one KV head per rank,
    each replicated over ``tp_size // num_kv_heads`` consecutive ranks. A rank's cartridge is the slice of its KV
    heads (`kv_heads`, global indices), so its shared kernel pairs each of its query heads with the right keys."""

    tp_size: int
    rank: int
    num_qo_heads: int
    num_kv_heads: int

    def __post_init__(self) -> None:
        tp, h, hq = self.tp_size, self.num_kv_heads, self.num_qo_heads
        if tp < 1 or not 0 <= self.rank < tp:
            raise CartridgeServingError(f"tensor parallel rank {self.rank} of {tp}: not a rank of the group")
        if hq % tp:
            raise CartridgeServingError(f"tensor_parallel_size {tp}: does not divide the {hq} query heads")
        if h % tp and tp % h:
            raise CartridgeServingError(
                f"tensor_parallel_size {tp}: neither divides nor is a multiple of the {h} KV heads"
            )

    @property
    def kv_heads(self) -> range:
        if self.tp_size <= self.num_kv_heads:
            per = self.num_kv_heads // self.tp_size
            return range(self.rank * per, (self.rank + 1) * per)
        head = self.rank // (self.tp_size // self.num_kv_heads)
        return range(head, head + 1)

    @property
    def qo_heads(self) -> range:
        per = self.num_qo_heads // self.tp_size
        return range(self.rank * per, (self.rank + 1) * per)

    def local(self, engine: EngineFacts) -> EngineFacts:
        """`engine` as this rank's attention sees it: its own query and KV head counts."""
        return replace(engine, num_qo_heads=len(self.qo_heads), num_kv_heads=len(self.kv_heads))


def rank_heads(engine: EngineFacts, rank: int) -> RankHeads:
    return RankHeads(engine.tensor_parallel_size, rank, engine.num_qo_heads, engine.num_kv_heads)


@dataclass(frozen=True)
class CartridgeFacts:
    num_layers: int
    num_tokens: int
    num_kv_heads: int
    head_dim: int


def _fail(field: str, want: str, got: object) -> None:
    raise CartridgeServingError(f"cartridge serving: {field}: expected {want}, got {got!r}")


def check_engine(cfg: ServingConfig, engine: EngineFacts) -> None:
    """Fail closed on anything the mode cannot serve correctly; called before any request is served."""
    # A rank's attention and KV cache hold only its slice of the KV heads (its layers, under pipeline parallelism).
    # The cartridge's per-rank slice is defined (RankHeads, load_layers(heads=...)), but tensor parallelism has not
    # run on several GPUs (issue 20): until its agreement with TP=1 is shown, it is refused, not served unchecked.
    parallel = (engine.tensor_parallel_size, engine.pipeline_parallel_size)
    if parallel != (1, 1):
        _fail(
            "parallel_config",
            "tensor_parallel_size = pipeline_parallel_size = 1 (tensor parallelism is not yet qualified)",
            f"tensor_parallel_size={parallel[0]}, pipeline_parallel_size={parallel[1]}",
        )
    if cfg.mode is Mode.SHARED:
        if engine.speculative:
            _fail("speculative_config", "none in shared mode (drafts would attend without the cartridge)", "set")
        if engine.prefix_caching:
            _fail("enable_prefix_caching", "False in shared mode", True)
        if engine.cascade_attn:
            _fail("disable_cascade_attn", "True in shared mode (one kernel, one softmax; no cascade split)", False)
        if engine.attention_backend != "CUSTOM":
            _fail("attention_config.backend", "CUSTOM (qualify.serve.backend) in shared mode", engine.attention_backend)
        if engine.block_size not in KERNEL_PAGE_SIZES:
            _fail(
                "block_size",
                f"one of the kernel's page sizes {sorted(KERNEL_PAGE_SIZES)} in shared mode",
                engine.block_size,
            )
        if cfg.cartridge_len % engine.block_size:
            _fail(
                "block_size",
                f"a divisor of the cartridge length {cfg.cartridge_len} (the kernel's live pages start on a page "
                "boundary)",
                engine.block_size,
            )
        wrapped = set(SHARED_ARCHITECTURES.values())
        if not any(a in wrapped for a in engine.architectures):
            _fail(
                "hf_overrides.architectures",
                f"one of {sorted(wrapped)} (positions after the cartridge) in shared mode",
                list(engine.architectures),
            )
        if engine.kv_cache_dtype not in ("auto", "bfloat16"):
            _fail(
                "kv_cache_dtype",
                "auto/bfloat16 (live keys stay BF16; live V dtype is live_value_dtype)",
                engine.kv_cache_dtype,
            )
        if engine.model_dtype != "bfloat16":
            _fail("dtype", "bfloat16 (the kernel's query and key dtype)", engine.model_dtype)
        if engine.kv_connector is not None:
            _fail("kv_transfer_config", "unset in shared mode (nothing is injected)", engine.kv_connector)
    else:
        if engine.kv_connector != CONNECTOR_CLASS:
            _fail("kv_transfer_config.kv_connector", f"{CONNECTOR_CLASS} in inject mode", engine.kv_connector)
        if engine.speculative:
            _fail("speculative_config", "none (not qualified with cartridges)", "set")


def check_cartridge(cfg: ServingConfig, engine: EngineFacts, cart: CartridgeFacts) -> None:
    """The cartridge file must match the model and the declared length."""
    if cart.num_tokens != cfg.cartridge_len:
        _fail(f"cartridge {cfg.path} length", f"cartridge_len = {cfg.cartridge_len}", cart.num_tokens)
    want = (engine.num_layers, engine.num_kv_heads, engine.head_dim)
    got = (cart.num_layers, cart.num_kv_heads, cart.head_dim)
    if want != got:
        _fail(f"cartridge {cfg.path} shape (layers, kv heads, head_dim)", f"the model's {want}", got)


def shared_block_size(cartridge_len: int) -> int:
    """The largest kernel page size that divides the cartridge length."""
    for size in KERNEL_PAGE_SIZES:
        if cartridge_len % size == 0:
            return size
    raise CartridgeServingError(
        f"cartridge length {cartridge_len} is not a multiple of any page size the kernel supports {KERNEL_PAGE_SIZES}"
    )


def engine_kwargs(
    cfg: ServingConfig, architecture: str, *, prefix_caching: bool = False, **base: Any
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` serving `cfg` with a model of `architecture`.

    ``base`` (model, dtype, load_format, max_num_seqs, ...) is kept; the mode's own settings win over it.
    `prefix_caching` (inject only) lets vLLM's prefix cache share the cartridge's blocks between requests: the
    connector then writes only the cartridge positions a request's cache hit does not already hold.
    """
    if prefix_caching and cfg.mode is not Mode.INJECT:
        _fail("enable_prefix_caching", "False in shared mode (the cartridge is outside the paged cache)", True)
    out = dict(base)
    extra = dict(out.pop("additional_config", None) or {})
    extra[ADDITIONAL_CONFIG_KEY] = cfg.model_dump(mode="json")
    out["additional_config"] = extra
    out["enable_prefix_caching"] = prefix_caching
    if cfg.mode is Mode.INJECT:
        out["kv_transfer_config"] = {
            "kv_connector": CONNECTOR_CLASS,
            "kv_connector_module_path": CONNECTOR_MODULE,
            "kv_role": "kv_both",
        }
        return out
    if architecture not in SHARED_ARCHITECTURES:
        raise CartridgeServingError(
            f"shared mode supports architectures {sorted(SHARED_ARCHITECTURES)}; got {architecture!r}"
        )
    overrides = dict(out.pop("hf_overrides", None) or {})
    overrides["architectures"] = [SHARED_ARCHITECTURES[architecture]]
    out["hf_overrides"] = overrides
    out["attention_config"] = {**(out.get("attention_config") or {}), "backend": "CUSTOM"}
    out["block_size"] = shared_block_size(cfg.cartridge_len)
    out["disable_cascade_attn"] = True
    out["dtype"] = "bfloat16"
    out.pop("kv_cache_dtype", None)
    return out


def engine_facts(vllm_config: Any) -> EngineFacts:
    """Read EngineFacts from a vLLM VllmConfig (duck-typed, so this module needs no vLLM import)."""
    mc, cc = vllm_config.model_config, vllm_config.cache_config
    hf = mc.hf_config
    backend = getattr(getattr(vllm_config, "attention_config", None), "backend", None)
    ktc = getattr(vllm_config, "kv_transfer_config", None)
    pc = getattr(vllm_config, "parallel_config", None)
    return EngineFacts(
        architectures=tuple(getattr(hf, "architectures", None) or ()),
        num_layers=int(hf.num_hidden_layers),
        num_qo_heads=int(hf.num_attention_heads),
        num_kv_heads=int(getattr(hf, "num_key_value_heads", None) or hf.num_attention_heads),
        head_dim=int(mc.get_head_size()),
        block_size=int(cc.block_size),
        kv_cache_dtype=str(cc.cache_dtype),
        model_dtype=str(mc.dtype).replace("torch.", ""),
        speculative=getattr(vllm_config, "speculative_config", None) is not None,
        prefix_caching=bool(cc.enable_prefix_caching),
        cascade_attn=not bool(getattr(mc, "disable_cascade_attn", False)),
        attention_backend=getattr(backend, "name", None) if backend is not None else None,
        kv_connector=getattr(ktc, "kv_connector", None) if ktc is not None else None,
        tensor_parallel_size=int(getattr(pc, "tensor_parallel_size", 1) or 1),
        pipeline_parallel_size=int(getattr(pc, "pipeline_parallel_size", 1) or 1),
    )


def checked_serving(vllm_config: Any, mode: Mode, component: str) -> tuple[ServingConfig, EngineFacts]:
    """The engine's ServingConfig for `component`, which serves `mode` only, after every guard has run."""
    cfg = serving_config(getattr(vllm_config, "additional_config", None))
    if cfg is None or cfg.mode is not mode:
        raise CartridgeServingError(
            f"{component} needs additional_config.{ADDITIONAL_CONFIG_KEY} with mode: {mode.value} "
            "(build the engine arguments with qualify.serve.config.engine_kwargs)"
        )
    facts = engine_facts(vllm_config)
    check_engine(cfg, facts)
    return cfg, facts


def layer_order(name: str) -> tuple[int, str]:
    """Sort key of attention layer names ("model.layers.12.self_attn.attn") by layer number."""
    for part in name.split("."):
        if part.isdigit():
            return int(part), name
    return 1 << 30, name
