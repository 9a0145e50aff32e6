"""The perf gate files compile to the intended items, lint catches impossible comparisons, and on a host
without the GPU stack every perf item is skipped (INCOMPLETE), never run or passed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qualify.cli import main
from qualify.compile import compile_gate_file
from qualify.errors import GateFileError
from qualify.host import detect_host
from qualify.kinds.perf_nonregression.params import PerfNonRegressionParams
from qualify.registry import default_registry

ROOT = Path(__file__).resolve().parents[2]
GATE = ROOT / "gates" / "perf.yaml"
TARGETS = ROOT / "gates" / "gpu" / "perf_targets.yaml"
SLOWED = ROOT / "gates" / "gpu" / "perf_slowed.yaml"

BASE = """
suite: perf-lint
version: 1
defaults:
  shape: {{id: s, batches: [1, 16], suffixes: [128]}}
gates:
  - id: g
    kind: perf_nonregression
    candidate: {candidate}
    baseline: {baseline}
    metric: {metric}
    batch: {batch}
    suffix: 128
    thresholds: {thresholds}
"""


def lint(tmp_path: Path, **kw: object) -> str:
    fields = {"candidate": "fused-k16v8", "baseline": "flashinfer-inject-bf16", "metric": "decode_tokens_per_s",
              "batch": 1, "thresholds": "{decode_tokens_per_s: 1.0}"} | kw  # fmt: skip
    path = tmp_path / "g.yaml"
    path.write_text(BASE.format(**fields))
    try:
        compile_gate_file(path, default_registry())
    except GateFileError as exc:
        return exc.diagnostics()
    return ""


def test_default_gate_file_compiles_to_the_issue_matrix() -> None:
    items = compile_gate_file(GATE, default_registry()).items
    by_gate: dict[str, list[PerfNonRegressionParams]] = {}
    for it in items:
        assert isinstance(it.params, PerfNonRegressionParams)
        # The FA3 baseline comes from vLLM, every other baseline from FlashInfer.
        fa3 = it.params.baseline == "fa3-shared-pages-bf16"
        assert set(it.requires) == (
            {"cuda", "sm90", "triton", "vllm"} if fa3 else {"cuda", "sm90", "triton", "flashinfer"}
        )
        by_gate.setdefault(it.gate_id, []).append(it.params)
    main_gate = by_gate["perf-shared-vs-inject"]
    assert {(p.metric, p.batch) for p in main_gate} == {
        (m, b) for m in ("decode_tokens_per_s", "ttft_proxy_ms") for b in (1, 16, 64)
    }
    p = main_gate[0]
    assert (p.candidate, p.baseline) == ("fused-k16v8", "flashinfer-inject-bf16")
    assert (p.shape.model, p.shape.num_layers, p.shape.cartridge_len, p.shape.page_size) == ("Qwen3-8B", 36, 632, 8)
    assert p.shape.generated_tokens == 32 and p.shape.decode_live(128) == 144
    assert (p.timing.warmups, p.timing.repetitions, p.timing.processes) == (2, 5, 3)
    assert p.thresholds == {"decode_tokens_per_s": 1.0, "ttft_proxy_ms": 1.0}
    release = by_gate["perf-release"][0]
    assert release.baseline == "release" and release.thresholds["decode_tokens_per_s"] == 0.97
    assert {p.metric for p in by_gate["perf-shared-vs-inject-fp8"]} == {"decode_tokens_per_s"}
    # Both shared-page baselines (what prefix caching gives), each over the whole matrix.
    for gate in ("perf-shared-vs-shared-pages", "perf-shared-vs-fa3-shared-pages"):
        assert len(by_gate[gate]) == 12 and {p.thresholds["decode_tokens_per_s"] for p in by_gate[gate]} == {1.0}
    # Every gate shares one shape set, so one worker per implementation serves all of them.
    assert len({p.shape.model_dump_json() for ps in by_gate.values() for p in ps}) == 1


def test_slowed_gate_file_declares_real_extra_work() -> None:
    items = compile_gate_file(SLOWED, default_registry()).items
    assert items and all(it.params.candidate_options.redundant_launches == 2 for it in items)  # type: ignore[attr-defined]
    assert {it.params.timing.processes for it in items} == {2}  # type: ignore[attr-defined]


def test_a_gate_with_no_process_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    fields = {"candidate": "fused-k16v8", "baseline": "flashinfer-inject-bf16", "metric": "decode_tokens_per_s",
              "batch": 1, "thresholds": "{decode_tokens_per_s: 1.0}"}  # fmt: skip
    path.write_text(BASE.format(**fields) + "    timing: {processes: 0}\n")
    with pytest.raises(GateFileError) as info:
        compile_gate_file(path, default_registry())
    text = info.value.diagnostics()
    assert "processes must be at least 1" in text and "process-to-process variation" in text and "got 0" in text
    assert "g.yaml:" in text


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"baseline": "flashinfer"}, "choices: fused-k16v8, fused-k16v16"),
        ({"candidate": "vllm"}, "has no implementation 'vllm'"),
        ({"baseline": "flashinfer-inject-fp8", "metric": "ttft_proxy_ms", "thresholds": "{ttft_proxy_ms: 1.0}"},
         "does not measure ttft_proxy_ms"),
        ({"batch": 64}, "batch 64 is not in the shape set's batches"),
        ({"metric": "ttft_proxy_ms"}, "no threshold for metric ttft_proxy_ms"),
        ({"baseline": "fused-k16v8"}, "same implementation with the same options"),
        ({"thresholds": "{decode_tokens_per_s: 0}"}, "must be positive"),
    ],
)  # fmt: skip
def test_lint_rejects_impossible_comparisons(tmp_path: Path, fields: dict[str, object], message: str) -> None:
    assert message in lint(tmp_path, **fields)


def test_lint_accepts_a_valid_cell(tmp_path: Path) -> None:
    assert lint(tmp_path) == ""
    assert lint(tmp_path, baseline="release") == ""


@pytest.mark.skipif("flashinfer" in detect_host().available, reason="this host could run the perf gate")
def test_on_a_host_without_the_gpu_stack_every_perf_item_is_skipped(tmp_path: Path) -> None:
    assert main(["run", str(GATE), "--out", str(tmp_path), "--non-release", "--name", "perf"]) == 0
    report = json.loads((tmp_path / "perf.json").read_text())
    assert report["verdict"] == "INCOMPLETE"
    assert {i["status"] for i in report["items"]} == {"skipped"}
    assert len(report["items"]) == len(compile_gate_file(GATE, default_registry()).items)


def test_issue_17_targets_cover_every_point_once_per_page_size_and_baseline() -> None:
    items = compile_gate_file(TARGETS, default_registry()).items
    want = {(1, 128): 1.0, (1, 1024): 1.0, (16, 1024): 1.0, (16, 128): 1.3, (64, 128): 2.0, (64, 1024): 1.3}
    seen: dict[tuple[int, str], dict[tuple[int, int], float]] = {}
    for it in items:
        p = it.params
        assert isinstance(p, PerfNonRegressionParams) and p.candidate == "fused-k16v8"
        assert p.metric == "decode_tokens_per_s" and p.shape.cartridge_len % p.shape.page_size == 0
        # Each baseline needs only its own library: without vLLM the FlashInfer items still run, and the reverse.
        library = "vllm" if p.baseline.startswith("fa3") else "flashinfer"
        assert set(it.requires) == {"cuda", "sm90", "triton", library}
        point = (p.batch, p.shape.decode_live(p.suffix))
        cells = seen.setdefault((p.shape.page_size, p.baseline), {})
        assert point not in cells, (p.shape.page_size, p.baseline, point)
        cells[point] = p.thresholds["decode_tokens_per_s"]
    pairs = {(page, b) for page in (8, 16) for b in ("fa3-shared-pages-bf16", "flashinfer-shared-pages-bf16")}
    assert set(seen) == pairs and all(cells == want for cells in seen.values())


def test_named_streams_need_an_item_to_pick_one(tmp_path: Path) -> None:
    from qualify.perf.spec import ShapeSet

    base = {"id": "s", "batches": [4], "suffixes": [8]}
    streams = [{"id": "closed", "requests": 10}, {"id": "poisson", "requests": 5, "arrival_rate_per_s": 2.0}]
    with pytest.raises(ValueError, match="give one or the other"):
        ShapeSet(**base, stream_requests=10, streams=streams)
    with pytest.raises(ValueError, match="must not repeat"):
        ShapeSet(**base, streams=[streams[0], streams[0]])
    serving = ROOT / "gates" / "engine_serving.yaml"
    items = compile_gate_file(serving, default_registry()).items
    named = {it.params.stream for it in items}  # type: ignore[attr-defined]
    assert named == {"closed", "poisson24"}
    # One shape for both gates: one engine per process serves both kinds of stream.
    assert len({it.params.shape.model_dump_json() for it in items}) == 1  # type: ignore[attr-defined]
    text = serving.read_text()
    unnamed = tmp_path / "unnamed.yaml"
    unnamed.write_text(text.replace("      stream: [poisson24]\n", ""))
    with pytest.raises(GateFileError, match="must name one of them"):
        compile_gate_file(unnamed, default_registry())
