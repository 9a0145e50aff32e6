"""qualify.serve.config: the serving guards fail closed naming the field, and engine_kwargs passes them.

No vLLM here: EngineFacts are written by hand, the way engine_facts() would read them from a VllmConfig.
"""

from __future__ import annotations

import copy
import random
from types import SimpleNamespace
from typing import Any

import pytest
from _seeding import derived_seed

from qualify.errors import QualifyError
from qualify.serve.config import (
    ADDITIONAL_CONFIG_KEY,
    CONNECTOR_CLASS,
    CONNECTOR_MODULE,
    SHARED_ARCHITECTURES,
    CartridgeFacts,
    CartridgeServingError,
    EngineFacts,
    Mode,
    ServingConfig,
    check_cartridge,
    check_engine,
    check_vllm_version,
    checked_serving,
    engine_facts,
    engine_kwargs,
    layer_order,
    serving_config,
    shared_block_size,
)

PATH = "/carts/qwen3-640.safetensors"


def config(mode: str = "shared", cartridge_len: int = 640, **kw: Any) -> ServingConfig:
    return ServingConfig(mode=mode, path=PATH, cartridge_len=cartridge_len, **kw)


def engine(**override: Any) -> EngineFacts:
    """An engine that serves a 640-token cartridge in shared mode correctly."""
    facts = {
        "architectures": ("CartridgeQwen3ForCausalLM",),
        "num_layers": 28,
        "num_qo_heads": 16,
        "num_kv_heads": 8,
        "head_dim": 128,
        "block_size": 16,
        "kv_cache_dtype": "auto",
        "model_dtype": "bfloat16",
        "speculative": False,
        "prefix_caching": False,
        "cascade_attn": False,
        "attention_backend": "CUSTOM",
        "kv_connector": None,
    }
    facts.update(override)
    return EngineFacts(**facts)


def inject_engine(**override: Any) -> EngineFacts:
    base = {
        "architectures": ("Qwen3ForCausalLM",),
        "attention_backend": None,
        "kv_connector": CONNECTOR_CLASS,
        "prefix_caching": True,
        "cascade_attn": True,
    }
    return engine(**{**base, **override})


def assert_names_field(exc: pytest.ExceptionInfo, field: str) -> None:
    assert isinstance(exc.value, QualifyError)
    assert f"cartridge serving: {field}: expected" in str(exc.value), str(exc.value)


# ---- check_engine ---------------------------------------------------------------------------------
def test_good_engines_pass() -> None:
    check_engine(config(), engine())
    check_engine(config(cartridge_len=632), engine(block_size=8))
    check_engine(config("inject"), inject_engine())
    check_engine(config("inject", cartridge_len=20), inject_engine(block_size=16))  # inject: any block size


@pytest.mark.parametrize(
    ("facts", "field"),
    [
        ({"speculative": True}, "speculative_config"),
        ({"prefix_caching": True}, "enable_prefix_caching"),
        ({"cascade_attn": True}, "disable_cascade_attn"),
        ({"attention_backend": "FLASH_ATTN"}, "attention_config.backend"),
        ({"attention_backend": None}, "attention_config.backend"),
        ({"architectures": ("Qwen3ForCausalLM",)}, "hf_overrides.architectures"),
        ({"architectures": ()}, "hf_overrides.architectures"),
        ({"kv_cache_dtype": "fp8"}, "kv_cache_dtype"),
        ({"kv_cache_dtype": "fp8_e4m3"}, "kv_cache_dtype"),
        ({"model_dtype": "float16"}, "dtype"),
        ({"model_dtype": "float32"}, "dtype"),
        ({"kv_connector": CONNECTOR_CLASS}, "kv_transfer_config"),
    ],
    ids=lambda v: v if isinstance(v, str) else "-".join(f"{k}={v[k]}" for k in v),
)
def test_shared_mode_guards_fail_closed_naming_the_field(facts: dict, field: str) -> None:
    with pytest.raises(CartridgeServingError) as exc:
        check_engine(config(), engine(**facts))
    assert_names_field(exc, field)


@pytest.mark.parametrize("mode", ["shared", "inject"])
@pytest.mark.parametrize(("tp", "pp"), [(2, 1), (4, 1), (1, 2), (2, 2)])
def test_parallel_engines_are_refused_until_the_cartridge_is_sliced_per_rank(mode: str, tp: int, pp: int) -> None:
    facts = engine if mode == "shared" else inject_engine
    with pytest.raises(CartridgeServingError) as exc:
        check_engine(config(mode), facts(tensor_parallel_size=tp, pipeline_parallel_size=pp))
    assert_names_field(exc, "parallel_config")
    assert f"tensor_parallel_size={tp}, pipeline_parallel_size={pp}" in str(exc.value)


def test_engine_facts_read_the_parallel_sizes_from_a_vllm_config() -> None:
    tp = random.choice([1, 2, 4, 8])
    hf = SimpleNamespace(architectures=["CartridgeQwen3ForCausalLM"], num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2)  # fmt: skip
    vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(hf_config=hf, get_head_size=lambda: 64, dtype="torch.bfloat16",
                                     disable_cascade_attn=True),
        cache_config=SimpleNamespace(block_size=8, cache_dtype="auto", enable_prefix_caching=False),
        parallel_config=SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1),
    )  # fmt: skip
    facts = engine_facts(vllm_config)
    assert (facts.tensor_parallel_size, facts.pipeline_parallel_size) == (tp, 1)
    del vllm_config.parallel_config  # a config without one is a single rank
    assert (engine_facts(vllm_config).tensor_parallel_size, engine_facts(vllm_config).pipeline_parallel_size) == (1, 1)


@pytest.mark.parametrize(("cartridge_len", "block_size"), [(632, 16), (20, 8), (20, 16), (648, 16)])
def test_shared_block_size_must_divide_the_cartridge(cartridge_len: int, block_size: int) -> None:
    with pytest.raises(CartridgeServingError) as exc:
        check_engine(config(cartridge_len=cartridge_len), engine(block_size=block_size))
    assert_names_field(exc, "block_size")
    assert str(cartridge_len) in str(exc.value)


@pytest.mark.parametrize(
    ("facts", "field"),
    [
        ({"kv_connector": None}, "kv_transfer_config.kv_connector"),
        ({"kv_connector": "LMCacheConnectorV1"}, "kv_transfer_config.kv_connector"),
        ({"speculative": True}, "speculative_config"),
    ],
    ids=["no-connector", "other-connector", "speculative"],
)
def test_inject_mode_guards(facts: dict, field: str) -> None:
    with pytest.raises(CartridgeServingError) as exc:
        check_engine(config("inject"), inject_engine(**facts))
    assert_names_field(exc, field)


# ---- check_cartridge ------------------------------------------------------------------------------
def test_cartridge_must_match_length_and_model_shape() -> None:
    good = CartridgeFacts(num_layers=28, num_tokens=640, num_kv_heads=8, head_dim=128)
    check_cartridge(config(), engine(), good)
    for bad, what in [
        (CartridgeFacts(28, 639, 8, 128), "length"),
        (CartridgeFacts(27, 640, 8, 128), "shape"),
        (CartridgeFacts(28, 640, 4, 128), "shape"),
        (CartridgeFacts(28, 640, 8, 64), "shape"),
    ]:
        with pytest.raises(CartridgeServingError) as exc:
            check_cartridge(config(), engine(), bad)
        assert PATH in str(exc.value) and what in str(exc.value), str(exc.value)


# ---- serving_config -------------------------------------------------------------------------------
@pytest.mark.parametrize("additional", [None, {}, {"other": 1}, "cartridge", ["cartridge"]])
def test_no_cartridge_means_none(additional: Any) -> None:
    assert serving_config(additional) is None


def test_serving_config_round_trips() -> None:
    raw = {"mode": "shared", "path": PATH, "cartridge_len": 632, "live_value_dtype": "fp8_e4m3"}
    cfg = serving_config({ADDITIONAL_CONFIG_KEY: raw, "unrelated": True})
    assert cfg == ServingConfig(**raw)
    assert cfg.mode is Mode.SHARED and cfg.cartridge_value_dtype == "fp8_e4m3"
    assert serving_config({ADDITIONAL_CONFIG_KEY: cfg.model_dump(mode="json")}) == cfg


@pytest.mark.parametrize("many", [list, tuple])
def test_a_list_of_cartridges_is_refused(many: type) -> None:
    one = {"mode": "shared", "path": PATH, "cartridge_len": 640}
    with pytest.raises(CartridgeServingError, match=r"additional_config\.cartridge: one cartridge per engine"):
        serving_config({ADDITIONAL_CONFIG_KEY: many([one, {**one, "path": "/carts/b.pt"}])})


def test_a_non_mapping_cartridge_entry_is_refused() -> None:
    with pytest.raises(CartridgeServingError, match=r"additional_config\.cartridge: a mapping, got str"):
        serving_config({ADDITIONAL_CONFIG_KEY: PATH})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"mode": "cascade"}, "mode"),
        ({"cartridge_len": 0}, "cartridge_len"),
        ({"cartridge_len": "many"}, "cartridge_len"),
        ({"placeholder_token_id": -1}, "placeholder_token_id"),
        ({"cartridge_value_dtype": "float16"}, "cartridge_value_dtype"),
        ({"live_value_dtype": "fp8_e5m2"}, "live_value_dtype"),
        ({"kernel_launch": "fast"}, "kernel_launch"),
        ({"cartrige_len": 640}, "cartrige_len"),  # a misspelt (extra) key is refused, not ignored
        ({"path": None}, "path"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bad_serving_config_fields_are_named(change: dict, field: str) -> None:
    raw = {"mode": "shared", "path": PATH, "cartridge_len": 640, **change}
    with pytest.raises(CartridgeServingError) as exc:
        serving_config({ADDITIONAL_CONFIG_KEY: raw})
    assert "additional_config.cartridge" in str(exc.value)
    assert field in str(exc.value), str(exc.value)


def test_missing_required_fields_are_named() -> None:
    for missing in ("mode", "path", "cartridge_len"):
        raw = {"mode": "inject", "path": PATH, "cartridge_len": 640}
        del raw[missing]
        with pytest.raises(CartridgeServingError, match=missing):
            serving_config({ADDITIONAL_CONFIG_KEY: raw})


def test_serving_config_is_frozen() -> None:
    cfg = config()
    with pytest.raises(ValueError):
        cfg.cartridge_len = 16


# ---- vLLM version ---------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["0.26.0", "0.26.3", "0.26.1+cu129"])
def test_supported_vllm_versions(version: str) -> None:
    check_vllm_version(version)


@pytest.mark.parametrize("version", ["0.25.1", "0.27.0", "1.0", "1.0.0", "0.2.6", "0.260.0"])
def test_other_vllm_versions_are_refused(version: str) -> None:
    with pytest.raises(CartridgeServingError) as exc:
        check_vllm_version(version)
    assert version in str(exc.value) and "0.26" in str(exc.value)


# ---- block size and engine arguments ------------------------------------------------------------
def test_shared_block_size() -> None:
    assert shared_block_size(632) == 8
    assert shared_block_size(640) == 16
    assert shared_block_size(8) == 8
    assert shared_block_size(16) == 16
    for _ in range(20):
        n = 8 * (random.randrange(500) + 1)  # `random` is seeded per test (tests/conftest.py)
        assert shared_block_size(n) == (16 if n % 16 == 0 else 8)
    for bad in (20, 4, 1, 633, 644):
        with pytest.raises(CartridgeServingError, match=str(bad)):
            shared_block_size(bad)


def facts_from_kwargs(kw: dict[str, Any], architecture: str) -> EngineFacts:
    """What vLLM 0.26 would make of these LLM(...) arguments, for a Qwen3-0.6B-like model (vLLM defaults)."""
    arch = (kw.get("hf_overrides") or {}).get("architectures") or [architecture]
    dtype = kw.get("dtype", "auto")
    return EngineFacts(
        architectures=tuple(arch),
        num_layers=28,
        num_qo_heads=16,
        num_kv_heads=8,
        head_dim=128,
        block_size=kw.get("block_size", 16),
        kv_cache_dtype=kw.get("kv_cache_dtype", "auto"),
        model_dtype="bfloat16" if dtype == "auto" else dtype,  # the checkpoint's own dtype is bfloat16
        speculative=kw.get("speculative_config") is not None,
        prefix_caching=kw.get("enable_prefix_caching", True),
        cascade_attn=not kw.get("disable_cascade_attn", False),
        attention_backend=(kw.get("attention_config") or {}).get("backend"),
        kv_connector=(kw.get("kv_transfer_config") or {}).get("kv_connector"),
    )


# Settings a caller might pass that the mode must override (or keep, where they are harmless).
BASE = {
    "model": "Qwen/Qwen3-0.6B",
    "max_num_seqs": 8,
    "dtype": "float16",
    "kv_cache_dtype": "fp8",
    "enable_prefix_caching": True,
    "hf_overrides": {"rope_theta": 1e6},
    "attention_config": {"flash_attn_version": 3},
    "additional_config": {"other_plugin": {"x": 1}},
}


@pytest.mark.parametrize("cartridge_len", [632, 640, 16 * (derived_seed(__name__) % 60 + 1) + 8])
@pytest.mark.parametrize("architecture", sorted(SHARED_ARCHITECTURES))
def test_engine_kwargs_shared_pass_check_engine(architecture: str, cartridge_len: int) -> None:
    cfg = config("shared", cartridge_len=cartridge_len, live_value_dtype="fp8_e4m3")
    base = copy.deepcopy(BASE)
    kw = engine_kwargs(cfg, architecture, **base)
    assert base == BASE, "engine_kwargs must not modify the caller's arguments"
    check_engine(cfg, facts_from_kwargs(kw, architecture))
    assert kw["block_size"] == shared_block_size(cartridge_len)
    assert kw["hf_overrides"] == {"rope_theta": 1e6, "architectures": [SHARED_ARCHITECTURES[architecture]]}
    assert kw["attention_config"] == {"flash_attn_version": 3, "backend": "CUSTOM"}
    assert kw["model"] == BASE["model"] and kw["max_num_seqs"] == 8
    assert kw["additional_config"]["other_plugin"] == {"x": 1}
    assert serving_config(kw["additional_config"]) == cfg
    assert "kv_transfer_config" not in kw


@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "MistralForCausalLM"])
def test_engine_kwargs_inject_pass_check_engine(architecture: str) -> None:
    cfg = config("inject", cartridge_len=20 + random.randrange(600), placeholder_token_id=151643)
    base = copy.deepcopy(BASE)
    kw = engine_kwargs(cfg, architecture, **base)
    assert base == BASE
    check_engine(cfg, facts_from_kwargs(kw, architecture))
    assert kw["kv_transfer_config"]["kv_connector"] == CONNECTOR_CLASS
    assert kw["kv_transfer_config"]["kv_connector_module_path"] == CONNECTOR_MODULE
    assert kw["enable_prefix_caching"] is False
    assert serving_config(kw["additional_config"]) == cfg


def test_engine_kwargs_inject_with_prefix_caching_shares_the_cartridge_blocks() -> None:
    cfg = config("inject", cartridge_len=20 + random.randrange(600))
    kw = engine_kwargs(cfg, "Qwen3ForCausalLM", prefix_caching=True, **copy.deepcopy(BASE))
    assert kw["enable_prefix_caching"] is True and kw["kv_transfer_config"]["kv_connector"] == CONNECTOR_CLASS
    check_engine(cfg, facts_from_kwargs(kw, "Qwen3ForCausalLM"))
    with pytest.raises(CartridgeServingError, match="enable_prefix_caching"):
        engine_kwargs(config("shared"), "Qwen3ForCausalLM", prefix_caching=True, model="m")


def test_engine_kwargs_shared_refuses_unwrapped_architectures_and_bad_lengths() -> None:
    with pytest.raises(CartridgeServingError, match="MistralForCausalLM"):
        engine_kwargs(config("shared"), "MistralForCausalLM", model="m")
    with pytest.raises(CartridgeServingError, match="20"):
        engine_kwargs(config("shared", cartridge_len=20), "Qwen3ForCausalLM", model="m")


def test_engine_kwargs_without_overrides_still_fail_check_engine() -> None:
    """The checks are not vacuous: the caller's own arguments, unmodified, are refused in shared mode."""
    cfg = config("shared")
    with pytest.raises(CartridgeServingError):
        check_engine(cfg, facts_from_kwargs(BASE, "Qwen3ForCausalLM"))


# ---- checked_serving / layer_order (what every vLLM-side component calls first) ---------------------------------
def _vllm_config(additional: Any, *, block_size: int = 16, prefix_caching: bool = False) -> Any:
    """A duck-typed VllmConfig of the shared-mode engine above (Qwen3 shape, CUSTOM backend)."""
    from types import SimpleNamespace

    hf = SimpleNamespace(
        architectures=["CartridgeQwen3ForCausalLM"], num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8
    )
    return SimpleNamespace(
        model_config=SimpleNamespace(
            hf_config=hf, get_head_size=lambda: 128, dtype="torch.bfloat16", disable_cascade_attn=True
        ),
        cache_config=SimpleNamespace(block_size=block_size, cache_dtype="auto", enable_prefix_caching=prefix_caching),
        attention_config=SimpleNamespace(backend=SimpleNamespace(name="CUSTOM")),
        kv_transfer_config=None,
        speculative_config=None,
        additional_config=additional,
    )


def test_checked_serving_returns_the_config_and_facts_of_a_good_engine() -> None:
    raw = {ADDITIONAL_CONFIG_KEY: config().model_dump(mode="json")}
    cfg, facts = checked_serving(_vllm_config(raw), Mode.SHARED, "the backend")
    assert cfg == config()
    assert facts == engine()


@pytest.mark.parametrize(
    "additional", [{}, None, {ADDITIONAL_CONFIG_KEY: {"mode": "inject", "path": PATH, "cartridge_len": 640}}]
)
def test_checked_serving_refuses_a_missing_or_other_mode_config(additional: Any) -> None:
    with pytest.raises(
        CartridgeServingError, match=r"the backend needs additional_config\.cartridge with mode: shared"
    ):
        checked_serving(_vllm_config(additional), Mode.SHARED, "the backend")


def test_checked_serving_runs_the_guards() -> None:
    raw = {ADDITIONAL_CONFIG_KEY: config().model_dump(mode="json")}
    with pytest.raises(CartridgeServingError) as exc:
        checked_serving(_vllm_config(raw, prefix_caching=True), Mode.SHARED, "the backend")
    assert_names_field(exc, "enable_prefix_caching")


def test_layer_order_sorts_by_layer_number_not_text() -> None:
    names = [f"model.layers.{i}.self_attn.attn" for i in (10, 2, 1, 0, 35)]
    random.shuffle(names)
    assert [layer_order(n)[0] for n in sorted(names, key=layer_order)] == [0, 1, 2, 10, 35]
    assert layer_order("lm_head")[0] > layer_order("model.layers.99.x")[0]


@pytest.mark.parametrize("launch", ["triton", "direct"])
def test_the_engine_settings_choose_the_shared_backend_s_launch_path(launch: str, tmp_path) -> None:
    from qualify.serve.engine import llm_kwargs
    from qualify.serve.layouts import layout
    from qualify.serve.settings import EngineSettings

    settings = EngineSettings(model_dir="fixtures/qwen3_small", kernel_launch=launch)
    kwargs = llm_kwargs(layout("shared-k16v8"), tmp_path / "c.safetensors", 16, settings)
    assert serving_config(kwargs["additional_config"]).kernel_launch == launch


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_the_backend_names_the_triton_prefill_only_where_the_gluon_one_cannot_read_the_cache(layout: str) -> None:
    # The backend's views of vLLM's cache (logical (blocks, H, block, 2 D), stored in `layout`'s order), as its
    # _bind takes them: the Gluon prefill's layout checks accept NHD's and refuse HND's, so the backend leaves NHD to
    # the dispatch and names the Triton prefill for HND.
    import torch
    from cartridge_attn import UnsupportedLayoutError, gluon_host

    from qualify.serve.config import prefill_impl_for_cache_layout

    blocks, h_kv, block, d = 6, 8, 16, 128
    physical = (blocks, block, h_kv, 2 * d) if layout == "NHD" else (blocks, h_kv, block, 2 * d)
    stored = torch.zeros(physical, dtype=torch.bfloat16)
    kv = stored.transpose(1, 2) if layout == "NHD" else stored  # logical (blocks, H, block, 2 D)
    pages = kv.transpose(1, 2)
    views = (("live K pages", pages[..., :d]), ("live V pages", pages[..., d:]))
    impl = prefill_impl_for_cache_layout(layout)
    if impl is None:
        for name, view in views:
            gluon_host._check_tma_rows(name, view, 1, d, heads_adjacent=False)
    else:
        assert impl == "triton"
        with pytest.raises(UnsupportedLayoutError, match="every head inside its token's row"):
            gluon_host._check_tma_rows(*views[0], 1, d, heads_adjacent=False)
