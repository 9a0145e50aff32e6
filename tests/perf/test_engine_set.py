"""The engine implementation set's measurement loop and the four-layout summary, with a fake engine (no GPU)."""

from __future__ import annotations

import json
import random
import sys
import types
from pathlib import Path

import pytest

from qualify.perf import engine_set, engine_summary
from qualify.perf.implementations import default_implementations
from qualify.perf.spec import WorkRequest, WorkResult
from qualify.serve.engine import BatchTiming
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
        engines[layout.name] = FakeEngine(speed=2.0 if layout.mode == "shared" else 1.0)
        return engines[layout.name]

    def run_batch(llm, prompts, max_tokens):
        llm.batches.append(prompts)
        wall = len(prompts) * max_tokens / (100.0 * llm.speed) * (1 + 0.01 * rng.random())
        return BatchTiming(wall_s=wall, output_tokens=len(prompts) * max_tokens, ttft_s=[wall / 3] * len(prompts))

    monkeypatch.setattr(engine_set, "build_llm", build_llm)
    monkeypatch.setattr(engine_set, "run_batch", run_batch)
    monkeypatch.setattr(engine_set, "kv_capacity", lambda llm: {"num_gpu_blocks": 100, "block_size": 8, "tokens": 800})
    monkeypatch.setenv(engine_set.RUNS_DIR_ENV, str(tmp_path / "runs"))
    return engines


def _request(layout: str, seed: int = 3) -> WorkRequest:
    impl = default_implementations().get_set("engine")
    return WorkRequest(
        implementation_set="engine",
        implementation=layout,
        measure=impl.measure,
        metrics=sorted(impl.get(layout).metrics),
        shape=SHAPE,
        timing={"warmups": 2, "repetitions": 4},
        seed=seed,
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
    assert cell.detail["admitted_concurrency"] == min(64, 800 // (16 + 5 + 3))
    assert result.cell("ttft_p50_ms", 1, 5).samples[0] > 0
    saved = WorkResult.model_validate_json((tmp_path / "runs" / "bf16-inject.json").read_text())
    assert saved.cells == result.cells


def test_shared_prompts_carry_only_the_question(fake_vllm) -> None:
    engine_set.measure(_request("shared-k16v8"))
    prompts = [p for b in fake_vllm["shared-k16v8"].batches for p in b]
    assert all(len(p) == 5 for p in prompts)


def test_summary_table_has_deltas_against_both_references(fake_vllm, tmp_path: Path) -> None:
    for name in ("bf16-inject", "global-fp8", "shared-k16v8", "shared-k16v8-live-fp8"):
        engine_set.measure(_request(name))
    rows = engine_summary.summarize(engine_summary.load_runs(tmp_path / "runs"))
    shared = next(r for r in rows if r["layout"] == "shared-k16v8" and r["batch"] == 4)
    assert shared["tok_s_vs_bf16-inject"]["ratio"] == pytest.approx(2.0, rel=0.03)
    assert shared["ttft_p50_vs_global-fp8"]["ratio"] == pytest.approx(0.5, rel=0.03)
    inject = next(r for r in rows if r["layout"] == "bf16-inject")
    assert "tok_s_vs_bf16-inject" not in inject
    table = engine_summary.render(rows)
    assert table.count("\n") == 1 + len(rows)
    assert shared["requests_that_fit"] == 800 // (5 + 3)
    json.dumps(rows)


def test_engine_set_lists_every_serving_layout() -> None:
    assert default_implementations().get_set("engine").names() == list(LAYOUTS)
