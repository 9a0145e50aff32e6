"""Scoring processes side by side (qualify.serve.score_processes) on CPU: real child processes stand in for the
vLLM scoring command, so the concurrency limit, the run-wide store, failures and timeouts are checked as they
happen, not as mocked calls."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import pytest

from qualify.errors import QualifyError
from qualify.quant.fp8 import Scaling
from qualify.serve import score_processes as sp

ROOT = Path(__file__).resolve().parents[2]
FIFA = ROOT / "fixtures" / "fifa_world_cup"
# A stand-in for `qualify serve-loss score`: sleeps, records when it ran, writes its document (or fails).
CHILD = r"""
import json, sys, time
out, stamps, label, sleep_s, code = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
began = time.time()
time.sleep(sleep_s)
with open(stamps, "a") as f:
    f.write(json.dumps([label, began, time.time()]) + "\n")
if code:
    print("engine said: boom", file=sys.stderr)
    sys.exit(code)
json.dump({"label": label, "items": []}, open(out, "w"))
"""


@pytest.fixture
def inputs(tmp_path: Path) -> sp.ScoringInputs:
    model = tmp_path / "model"
    model.mkdir()
    return sp.ScoringInputs(model_dir=model, cartridge=FIFA / "run1.pt", eval_set=FIFA / "eval_set.json",
                            scaling=Scaling.NONE)  # fmt: skip


def _fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, sleep_s: float = 0.0, fail: str = "") -> list:
    """Replace the scoring command by CHILD; returns the (label, memory share) of every process started."""
    started: list[tuple[str, float]] = []

    def command(run: sp.ScoringRun, inputs: sp.ScoringInputs, out: Path, memory_share: float) -> list[str]:
        started.append((run.label, memory_share))
        code = 3 if run.label == fail else 0
        return [sys.executable, "-c", CHILD, str(out), str(tmp_path / "stamps"), run.label, str(sleep_s), str(code)]

    monkeypatch.setattr(sp, "scoring_command", command)
    return started


def _runs(n: int) -> list[sp.ScoringRun]:
    quants = [None, "K8/V16", "K8/V8", "K4/V16", "K16/V8"]
    return [sp.ScoringRun(f"layout-{i}", quants[i % len(quants)]) for i in range(n)]


def _max_overlap(stamps: Path) -> int:
    spans = [json.loads(line)[1:] for line in stamps.read_text().splitlines()]
    return max(sum(1 for b, e in spans if b <= t < e) for t, _ in spans)


def test_at_most_engines_at_once_processes_run_and_each_asks_for_its_share(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, inputs: sp.ScoringInputs
) -> None:
    n, at_once = random.randint(5, 7), random.randint(2, 3)
    started = _fake(monkeypatch, tmp_path, sleep_s=0.4)
    seen: list[tuple[int, int]] = []
    docs, _ = sp.score_runs(_runs(n), inputs, store={}, engines_at_once=at_once, timeout_s=60,
                            progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert [d["label"] for d in docs] == [r.label for r in _runs(n)]
    assert all(d["engines_at_once"] == at_once and d["process"]["wall_s"] >= 0.4 for d in docs)
    assert 2 <= _max_overlap(tmp_path / "stamps") <= at_once
    assert [share for _, share in started] == pytest.approx([sp.SHARE_OF_ALL / at_once] * n)
    assert seen[0] == (0, n) and seen[-1] == (n, n) and len(seen) == n + 1


def test_the_run_wide_store_serves_a_run_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, inputs: sp.ScoringInputs
) -> None:
    started = _fake(monkeypatch, tmp_path)
    store: dict = {}
    runs = _runs(3)
    first, _ = sp.score_runs(runs, inputs, store=store, engines_at_once=2, timeout_s=60)
    again, _ = sp.score_runs([runs[1], sp.ScoringRun("another"), runs[1]], inputs, store=store, engines_at_once=2,
                             timeout_s=60)  # fmt: skip
    labels = [label for label, _ in started]
    # Side by side, the first call's processes start in any order; the second starts only the one it lacked.
    assert sorted(labels[:3]) == sorted(r.label for r in runs) and labels[3:] == ["another"]
    assert again[0] is first[1] and again[2] is first[1]
    # One missing run asks for the whole share (nothing runs beside it).
    assert started[-1][1] == pytest.approx(sp.SHARE_OF_ALL)


def test_what_is_served_keys_the_store(inputs: sp.ScoringInputs, tmp_path: Path) -> None:
    run, quant = sp.ScoringRun("bf16-inject"), sp.ScoringRun("bf16-inject", "K8/V8")
    other_scaling = sp.ScoringInputs(**{**inputs.__dict__, "scaling": Scaling.PER_HEAD})
    other_cartridge = sp.ScoringInputs(**{**inputs.__dict__, "cartridge": FIFA / "run2.pt"})
    # The scaling matters to fake-quantized runs only: the serving store quantizes its own.
    assert sp.memo_key(run, inputs) == sp.memo_key(run, other_scaling)
    assert sp.memo_key(quant, inputs) != sp.memo_key(quant, other_scaling)
    assert sp.memo_key(run, inputs) != sp.memo_key(run, other_cartridge)
    assert sp.memo_key(run, inputs) != sp.memo_key(quant, inputs)


def test_a_failed_run_is_named_with_its_output_and_the_others_are_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, inputs: sp.ScoringInputs
) -> None:
    runs = _runs(4)
    bad = random.choice(runs)
    _fake(monkeypatch, tmp_path, fail=bad.label)
    store: dict = {}
    with pytest.raises(QualifyError) as err:
        sp.score_runs(runs, inputs, store=store, engines_at_once=2, timeout_s=60)
    assert f"serving-path scores of {bad.layout}" in str(err.value) and "exited 3" in str(err.value)
    assert "engine said: boom" in str(err.value)
    assert len(store) == 3 and sp.memo_key(bad, inputs) not in store


def test_a_run_past_its_time_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, inputs: sp.ScoringInputs) -> None:
    _fake(monkeypatch, tmp_path, sleep_s=30)
    began = time.perf_counter()
    with pytest.raises(QualifyError, match="no result within 1 s"):
        sp.score_runs(_runs(1), inputs, store={}, engines_at_once=1, timeout_s=1)
    assert time.perf_counter() - began < 20


def test_meanwhile_runs_while_the_engines_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, inputs: sp.ScoringInputs
) -> None:
    _fake(monkeypatch, tmp_path, sleep_s=1.0)
    docs, when = sp.score_runs(_runs(2), inputs, store={}, engines_at_once=2, timeout_s=60, meanwhile=time.time)
    ends = [json.loads(line)[2] for line in (tmp_path / "stamps").read_text().splitlines()]
    assert len(docs) == 2 and when < min(ends)


def test_engines_at_once_must_be_positive(inputs: sp.ScoringInputs) -> None:
    with pytest.raises(ValueError, match="engines_at_once"):
        sp.score_runs(_runs(1), inputs, store={}, engines_at_once=0, timeout_s=1)
