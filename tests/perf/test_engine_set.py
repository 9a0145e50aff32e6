"""The engine implementation set's measurement loop and the layout summary, with a fake engine (no GPU)."""

from __future__ import annotations

import json
import logging
import random
import sys
import types
from pathlib import Path

import pytest

from qualify.perf import engine_set, engine_summary
from qualify.perf.implementations import default_implementations
from qualify.perf.spec import WorkRequest, WorkResult
from qualify.serve.dispatch_log import CACHED_EVENT, DispatchLog
from qualify.serve.engine import BatchTiming
from qualify.serve.gc_pauses import GcPauses
from qualify.serve.layouts import LAYOUTS

SHAPE = {
    "id": "t",
    "cartridge_len": 16,
    "page_size": 8,
    "batches": [1, 4],
    "suffixes": [5],
    "generated_tokens": 3,
    "engine": {"model_dir": "fixtures/qwen3_small"},
}


class FakeEngine:
    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.batches: list[list[list[int]]] = []


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, test_seed: int):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.26.0"))
    engines: dict[str, FakeEngine] = {}
    rng = random.Random(test_seed)

    def build_llm(layout, cartridge, cartridge_len, settings, seed=0):
        assert Path(cartridge).exists()
        logging.getLogger("vllm.v1.engine.core").info("init engine (profile, create kv cache, warmup model) took 9.5 s")
        logging.getLogger("vllm.v1.engine.core").info("an unrelated line")
        engines[layout.name] = FakeEngine(speed=2.0 if layout.mode == "shared" else 1.0)
        engines[layout.name].prefix_caching = layout.prefix_caching
        return engines[layout.name]

    def run_batch(llm, prompts, max_tokens):
        llm.batches.append(prompts)
        wall = len(prompts) * max_tokens / (100.0 * llm.speed) * (1 + 0.01 * rng.random())
        # A prefix cache serves the cartridge's full blocks (16 tokens = 2 blocks of 8) once it has seen them; the
        # engine core's connector logs what it found for every cartridge prompt.
        hit = 16 if getattr(llm, "prefix_caching", False) and len(llm.batches) > 1 else 0
        log = DispatchLog()
        for p in prompts:
            if p[:16] == [0] * 16:
                log.event(CACHED_EVENT, str(hit))
        pauses = GcPauses(collections=[3, 1, 1], pause_s=wall / 10)  # one full collection inside every batch
        return BatchTiming(
            wall_s=wall, output_tokens=len(prompts) * max_tokens, ttft_s=[wall / 3] * len(prompts), gc=pauses
        )

    monkeypatch.setattr(engine_set, "build_llm", build_llm)
    monkeypatch.setattr(engine_set, "run_batch", run_batch)
    monkeypatch.setattr(engine_set, "cudagraph_mode", lambda llm: "FULL_AND_PIECEWISE")
    monkeypatch.setattr(engine_set, "kv_capacity", lambda llm: {"num_gpu_blocks": 100, "block_size": 8, "tokens": 800})
    monkeypatch.setenv(engine_set.RUNS_DIR_ENV, str(tmp_path / "runs"))
    return engines


def _request(layout: str, seed: int = 3, process: int = 0) -> WorkRequest:
    impl = default_implementations().get_set("engine")
    return WorkRequest(
        implementation_set="engine",
        implementation=layout,
        measure=impl.measure,
        metrics=sorted(impl.get(layout).metrics),
        shape=SHAPE,
        timing={"warmups": 2, "repetitions": 4},
        seed=seed,
        process=process,
    )


def test_measure_sends_exact_shapes_and_records_cells(fake_vllm, tmp_path: Path) -> None:
    result = engine_set.measure(_request("bf16-inject"))
    eng = fake_vllm["bf16-inject"]
    # 2 batch sizes x (2 warm-ups + 4 timed), each batch exactly `batch` prompts of cartridge + question tokens.
    assert [len(b) for b in eng.batches] == [1] * 6 + [4] * 6
    assert all(p[:16] == [0] * 16 and len(p) == 21 and 0 not in p[16:] for b in eng.batches for p in b)
    # Fresh questions every batch.
    assert len({tuple(b[0]) for b in eng.batches}) == len(eng.batches)
    cell = result.cell("output_tokens_per_s", 4, 5)
    assert len(cell.samples) == 4 and all(s == pytest.approx(100.0, rel=0.02) for s in cell.samples)
    # 16 + 5 + 3 = 24 tokens: 3 whole blocks of 8 per request.
    assert cell.detail["kv_tokens_per_request"] == 24 and cell.detail["admitted_concurrency"] == 800 // 24 == 33
    assert cell.method == "vllm LLM.generate, CUDA graphs (FULL_AND_PIECEWISE)"
    # The collector's pauses are kept per timed batch, beside the batch's wall time.
    assert cell.detail["gc_full_collections"] == [1] * 4
    assert cell.detail["gc_pause_ms"] == pytest.approx([w / 10 for w in cell.detail["wall_ms"]])
    # vLLM's own start-up timings are kept; nothing else it logs.
    assert result.gpu["startup_phases"] == ["init engine (profile, create kv cache, warmup model) took 9.5 s"]
    assert result.cell("ttft_p50_ms", 1, 5).samples[0] > 0
    saved = WorkResult.model_validate_json((tmp_path / "runs" / "bf16-inject.p0.json").read_text())
    assert saved.cells == result.cells


@pytest.mark.parametrize(
    ("layout", "own", "shared"),
    [("bf16-inject", 24, 0), ("bf16-prefix-cached", 8, 16), ("shared-k16v8", 8, 0)],
)
def test_kv_tokens_count_whole_blocks_and_what_is_shared(layout: str, own: int, shared: int) -> None:
    # cartridge 16 (2 blocks of 8) + 5 question + 3 generated tokens
    assert engine_set.kv_tokens(LAYOUTS[layout], 16, 8, 8) == (own, shared)
    # A cartridge that ends inside a block: that block is the request's own under prefix caching.
    assert engine_set.kv_tokens(LAYOUTS["bf16-prefix-cached"], 20, 8, 8) == (16, 16)


def test_prefix_cached_layout_shares_the_cartridge_or_fails(fake_vllm, monkeypatch: pytest.MonkeyPatch) -> None:
    result = engine_set.measure(_request("bf16-prefix-cached"))
    cell = result.cell("output_tokens_per_s", 4, 5)
    assert cell.detail["cartridge_positions_cached"] == [16] * 4
    assert cell.detail["kv_tokens_shared"] == 16 and cell.detail["requests_that_fit"] == (800 - 16) // 8
    assert cell.detail["admitted_concurrency"] == 64  # max_num_seqs
    # The same layout with no cache hits is per-request injection under another name: refused.
    real_build = engine_set.build_llm

    def no_cache(*args, **kwargs):
        llm = real_build(*args, **kwargs)
        llm.prefix_caching = False
        return llm

    monkeypatch.setattr(engine_set, "build_llm", no_cache)
    with pytest.raises(RuntimeError, match="not shared"):
        engine_set.measure(_request("bf16-prefix-cached"))


def test_a_resolved_graph_mode_reported_by_the_backend_names_the_method(fake_vllm, monkeypatch) -> None:
    real_run = engine_set.run_batch

    def downgraded(llm, prompts, max_tokens):
        DispatchLog().note("cudagraph_mode", "PIECEWISE")
        return real_run(llm, prompts, max_tokens)

    monkeypatch.setattr(engine_set, "run_batch", downgraded)
    result = engine_set.measure(_request("shared-k16v8"))
    assert {c.method for c in result.cells} == {"vllm LLM.generate, CUDA graphs (PIECEWISE)"}


def test_shared_prompts_carry_only_the_question(fake_vllm) -> None:
    engine_set.measure(_request("shared-k16v8"))
    prompts = [p for b in fake_vllm["shared-k16v8"].batches for p in b]
    assert all(len(p) == 5 for p in prompts)


def test_summary_table_has_deltas_against_the_prefix_cached_references(fake_vllm, tmp_path: Path) -> None:
    for process in range(3):
        for name in ("bf16-prefix-cached", "fp8-prefix-cached", "bf16-inject", "shared-k16v8"):
            engine_set.measure(_request(name, seed=3 + process, process=process))
    runs = engine_summary.load_runs(tmp_path / "runs")
    assert [r.process for r in runs["shared-k16v8"]] == [0, 1, 2]
    rows = engine_summary.summarize(runs)
    shared = next(r for r in rows if r["layout"] == "shared-k16v8" and r["batch"] == 4)
    assert shared["processes"] == 3 and shared["repetitions"] == 12
    assert shared["tok_s_vs_bf16-prefix-cached"]["ratio"] == pytest.approx(2.0, rel=0.03)
    assert shared["tok_s_vs_bf16-prefix-cached"]["method"] == "process-t"
    assert shared["ttft_p50_vs_fp8-prefix-cached"]["ratio"] == pytest.approx(0.5, rel=0.03)
    assert "tok_s_vs_bf16-inject" not in shared  # two reference columns: the prefix-cached ones
    cached = next(r for r in rows if r["layout"] == "bf16-prefix-cached")
    assert "tok_s_vs_bf16-prefix-cached" not in cached
    table = engine_summary.render(rows)
    assert table.count("\n") == 1 + len(rows) and "tok/s vs bf16-prefix-cached" in table
    assert shared["requests_that_fit"] == 800 // 8
    json.dumps(rows)


def test_summary_ci_falls_back_to_the_bootstrap_with_one_process(fake_vllm, tmp_path: Path) -> None:
    for name in ("bf16-inject", "shared-k16v8"):
        engine_set.measure(_request(name))
    rows = engine_summary.summarize(engine_summary.load_runs(tmp_path / "runs"))
    shared = next(r for r in rows if r["layout"] == "shared-k16v8")
    assert shared["tok_s_vs_bf16-inject"]["method"] == "flat"
    assert "(flat)" in engine_summary.render(rows)


def test_engine_set_lists_every_serving_layout() -> None:
    assert default_implementations().get_set("engine").names() == list(LAYOUTS)


def test_host_speed_is_probed_before_each_timed_batch_and_shown_per_process(fake_vllm, monkeypatch, tmp_path) -> None:
    from qualify.serve.host_speed import HostSpeed

    rng = random.Random()
    probes: list[HostSpeed] = []
    real_run = engine_set.run_batch
    order: list[str] = []

    def probe() -> HostSpeed:
        order.append("probe")
        probes.append(HostSpeed(probe_us=rng.uniform(500, 3000), cpu=rng.randrange(16), allowed_cpus=16))
        return probes[-1]

    def run(llm, prompts, max_tokens):
        order.append("batch")
        return real_run(llm, prompts, max_tokens)

    monkeypatch.setattr(engine_set, "probe_host_speed", probe)
    monkeypatch.setattr(engine_set, "run_batch", run)
    result = engine_set.measure(_request("shared-k16v8", process=1))
    # Per batch size: 2 warm-ups unprobed, then a probe right before each of the 4 timed batches.
    assert order == (["batch"] * 2 + ["probe", "batch"] * 4) * 2
    cells = [result.cell("output_tokens_per_s", b, 5) for b in (1, 4)]
    assert [x for c in cells for x in c.detail["host_probe_us"]] == [p.probe_us for p in probes]
    assert [x for c in cells for x in c.detail["host_cpu"]] == [p.cpu for p in probes]
    rows = engine_summary.summarize(engine_summary.load_runs(tmp_path / "runs"))
    row = next(r for r in rows if r["batch"] == 4)
    want = sorted(p.probe_us for p in probes[4:])[1:3]
    assert row["per_process"][0]["host_probe_us"] == pytest.approx(sum(want) / 2)
    assert f"/{sum(want) / 2:.0f}" in engine_summary.render(rows)
