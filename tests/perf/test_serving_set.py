"""The serving set's worker with a fake engine (no GPU): equal KV memory, streams per cell, what is recorded."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from qualify.perf import engine_set, serving_set
from qualify.perf.implementations import default_implementations
from qualify.perf.spec import WorkRequest, WorkResult
from qualify.serve.dispatch_log import CACHED_EVENT, DispatchLog
from qualify.serve.layouts import LAYOUTS

SHAPE = {
    "id": "t",
    "cartridge_len": 16,
    "page_size": 8,
    "batches": [6],
    "suffixes": [5],
    "generated_tokens": 4,
    "stream_requests": 12,
    "engine": {"model_dir": "fixtures/qwen3_small", "kv_cache_memory_bytes": 1 << 20},
}
CAPACITY_TOKENS = 96  # what the fake's "KV memory" holds, in tokens of 8-token blocks


class FakeEngine:
    """Runs as many requests per step as its KV memory holds for the layout, one token each, FIFO."""

    def __init__(self, fit: int, cached: int | None) -> None:
        self.fit, self.cached = fit, cached
        self.queue: list[str] = []
        self.made: dict[str, int] = {}
        self.log = DispatchLog()
        # vLLM's in-process engine core, as far as the scheduler probe reads it
        self.scheduler = SimpleNamespace(running=[])
        self.engine_core = SimpleNamespace(engine_core=SimpleNamespace(scheduler=self.scheduler))

    def add_request(self, request_id: str, prompt: dict, params: object) -> None:
        assert set(prompt) == {"prompt_token_ids"}
        self.queue.append(request_id)
        self.made[request_id] = 0
        if self.cached is not None:  # the inject connector's record, as in the engine core
            self.log.event(CACHED_EVENT, str(self.cached))

    def step(self) -> list[SimpleNamespace]:
        out = []
        for rid in self.queue[: self.fit]:
            self.made[rid] += 1
            out.append(SimpleNamespace(request_id=rid, finished=self.made[rid] == 4,
                                       outputs=[SimpleNamespace(token_ids=[0] * self.made[rid])]))  # fmt: skip
        self.queue = [r for r in self.queue if self.made[r] < 4]
        self.scheduler.running = self.queue[: self.fit]
        return out


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.26.0"))
    built: dict[str, FakeEngine] = {}

    def build_llm(layout, cartridge, cartridge_len, settings, seed=0):
        assert settings.kv_cache_memory_bytes == 1 << 20
        own, shared = serving_set.kv_tokens(layout, cartridge_len, 5 + 4, 8)
        cached = None if layout.mode == "shared" else (shared if layout.prefix_caching else 0)
        built[layout.name] = FakeEngine((CAPACITY_TOKENS - shared) // own, cached)
        return SimpleNamespace(llm_engine=built[layout.name])

    monkeypatch.setattr(serving_set, "build_llm", build_llm)
    monkeypatch.setattr(serving_set, "kv_capacity", lambda llm: {"num_gpu_blocks": 12, "block_size": 8, "tokens": 96})
    monkeypatch.setattr(serving_set, "cudagraph_mode", lambda llm: "FULL_AND_PIECEWISE")
    monkeypatch.setattr(serving_set, "sampling_params", lambda max_tokens: ("params", max_tokens))
    monkeypatch.setenv(engine_set.RUNS_DIR_ENV, str(tmp_path / "runs"))
    return built


def _request(layout: str) -> WorkRequest:
    impl = default_implementations().get_set("serving")
    timing = {"warmups": 1, "repetitions": 3}
    return WorkRequest(implementation_set="serving", implementation=layout, measure=impl.measure,
                       metrics=sorted(impl.get(layout).metrics), shape=SHAPE, timing=timing)  # fmt: skip


def test_equal_kv_memory_admits_by_bytes_per_request(fake_vllm, tmp_path: Path) -> None:
    shared = serving_set.measure(_request("shared-k16v8"))
    inject = serving_set.measure(_request("bf16-inject"))
    s, i = (r.cell("completed_requests_per_s", 6, 5) for r in (shared, inject))
    # 96 tokens of KV: shared requests hold 16 (9 tokens in 8-token blocks), injected ones 32 (cartridge too).
    assert (s.detail["requests_that_fit"], i.detail["requests_that_fit"]) == (6, 3)
    assert s.detail["admitted_concurrency"] == 6 and i.detail["admitted_concurrency"] == 3
    assert len(s.samples) == 3 and min(s.samples) > 0  # 1 warm-up stream, 3 timed
    assert s.detail["peak_in_engine"] == [6.0] * 3
    # Measured in the scheduler: the shared layout ran 6 at once, injection (the cartridge per request) 3.
    assert s.detail["scheduler_running_peak"] == [6.0] * 3 and i.detail["scheduler_running_peak"] == [3.0] * 3
    assert {c.metric for c in shared.cells} == set(serving_set.STREAM_METRICS)
    saved = WorkResult.model_validate_json((tmp_path / "runs" / "serving-shared-k16v8.p0.json").read_text())
    assert saved.cells == shared.cells and saved.implementation_set == "serving"


def test_a_prefix_cached_stream_must_be_served_from_the_cache(fake_vllm, monkeypatch: pytest.MonkeyPatch) -> None:
    cell = serving_set.measure(_request("bf16-prefix-cached")).cell("itl_p95_ms", 6, 5)
    assert cell.detail["cartridge_positions_cached"] == [16] * 3 and cell.detail["kv_tokens_shared"] == 16
    real = serving_set.build_llm

    def no_cache(*args, **kwargs):
        llm = real(*args, **kwargs)
        llm.llm_engine.cached = 0
        return llm

    monkeypatch.setattr(serving_set, "build_llm", no_cache)
    with pytest.raises(RuntimeError, match="not shared"):
        serving_set.measure(_request("bf16-prefix-cached"))


def test_the_serving_set_lists_every_layout_with_the_stream_metrics() -> None:
    s = default_implementations().get_set("serving")
    assert s.names() == list(LAYOUTS)
    assert all(s.get(n).metrics == set(serving_set.STREAM_METRICS) for n in s.names())


def test_named_streams_are_served_in_turn_by_one_engine(fake_vllm, monkeypatch: pytest.MonkeyPatch) -> None:
    builds = []
    real = serving_set.build_llm
    monkeypatch.setattr(serving_set, "build_llm", lambda *a, **k: builds.append(a[0].name) or real(*a, **k))
    streams = [{"id": "closed", "requests": 12}, {"id": "poisson", "requests": 8, "arrival_rate_per_s": 4000.0}]
    shape = {k: v for k, v in SHAPE.items() if k != "stream_requests"} | {"streams": streams}
    result = serving_set.measure(_request("shared-k16v8").model_copy(update={"shape": shape}))
    assert builds == ["shared-k16v8"]  # one engine start for both kinds of stream
    # Each kind of stream is warmed up in its own right: 1 + 3 closed-loop streams of 12 requests, then 1 + 3
    # Poisson streams of 8 (a warm engine is not warm for a batch shape it has not served).
    assert len(fake_vllm["shared-k16v8"].made) == 4 * 12 + 4 * 8
    closed = result.cell("completed_requests_per_s", 6, 5, "closed")
    poisson = result.cell("completed_requests_per_s", 6, 5, "poisson")
    assert "closed loop" in closed.detail["stream"] and "Poisson" in poisson.detail["stream"]
    assert (closed.detail["warmup_streams"], poisson.detail["warmup_streams"]) == (1, 1)
    assert len(closed.samples) == len(poisson.samples) == 3
    assert closed.detail["stream"].startswith("12 requests") and poisson.detail["stream"].startswith("8 requests")
    assert len(result.cells) == 2 * len(serving_set.STREAM_METRICS)
    with pytest.raises(KeyError, match="completed_requests_per_s/b6/s5/poisson"):
        result.cell("completed_requests_per_s", 6, 5)  # an item must name its stream


def test_serve_summary_tables_each_stream_against_prefix_caching(fake_vllm, tmp_path: Path, capsys) -> None:
    import json

    from qualify.perf.serve_tables import summary_command

    streams = [{"id": "closed", "requests": 12}, {"id": "poisson", "requests": 8, "arrival_rate_per_s": 4000.0}]
    shape = {k: v for k, v in SHAPE.items() if k != "stream_requests"} | {"streams": streams}
    for layout in ("shared-k16v8-live-fp8", "bf16-prefix-cached"):
        for process in range(2):
            serving_set.measure(_request(layout).model_copy(update={"shape": shape, "process": process}))
    out = tmp_path / "summary.json"
    assert summary_command(tmp_path / "runs", out) == 0
    table = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert rows["engine"] == [] and {(r["stream"], r["layout"]) for r in rows["serving"]} == {
        (s, lay) for s in ("closed", "poisson") for lay in ("shared-k16v8-live-fp8", "bf16-prefix-cached")
    }
    cand = next(r for r in rows["serving"] if r["layout"] == "shared-k16v8-live-fp8" and r["stream"] == "closed")
    ref = next(r for r in rows["serving"] if r["layout"] == "bf16-prefix-cached" and r["stream"] == "closed")
    # Equal KV memory: the shared cartridge takes no pages, prefix caching keeps one copy of it in the cache.
    assert cand["requests_that_fit"] > ref["requests_that_fit"] and cand["processes"] == 2
    ratio = cand["completed_requests_per_s_vs_bf16-prefix-cached"]
    assert ratio["method"] == "process-t" and ratio["low"] <= ratio["ratio"] <= ratio["high"]
    assert "completed_requests_per_s_vs_bf16-prefix-cached" not in ref
    assert "| closed | 6 | shared-k16v8-live-fp8 | 2 |" in table and "| poisson | 6 | bf16-prefix-cached | 2 |" in table


def test_the_scheduler_probe_reads_an_in_process_core_and_follows_a_rebound_list() -> None:
    scheduler = SimpleNamespace(running=[1, 2, 3])
    engine = SimpleNamespace(engine_core=SimpleNamespace(engine_core=SimpleNamespace(scheduler=scheduler)))
    probe = serving_set.scheduler_running(engine)
    assert probe is not None and probe() == 3
    scheduler.running = [4]  # vLLM's scheduler rebinds its list when it filters finished requests
    assert probe() == 1
    # An engine core in another process (a client without the core): nothing to read, so nothing is claimed.
    assert serving_set.scheduler_running(SimpleNamespace(engine_core=SimpleNamespace())) is None
    assert serving_set.scheduler_running(SimpleNamespace()) is None
