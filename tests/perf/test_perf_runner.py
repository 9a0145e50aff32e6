"""The perf_nonregression runner end to end on CPU, with a synthetic implementation set measured in real
worker subprocesses: one process per implementation, a slowed candidate flagged, noise inconclusive,
and the release baseline read only from a verified signed report."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from qualify.compile import GateFile, GateItem
from qualify.errors import QualifyError, SourceLocation
from qualify.host import HostCapabilities
from qualify.kinds.perf_nonregression import PerfNonRegressionParams
from qualify.perf.implementations import Implementation, ImplementationRegistry, ImplementationSet
from qualify.perf.metrics import METRICS
from qualify.runners.context import RunContext
from qualify.runners.perf_nonregression import REGISTRY_OPTION, run
from qualify.signing import sign_report
from qualify.signing.keys import generate_keypair, load_private_key

HERE = Path(__file__).parent
BOTH = frozenset(METRICS)


def registry() -> ImplementationRegistry:
    reg = ImplementationRegistry()
    impls = tuple(Implementation(n, n, BOTH) for n in ("fast", "slow", "same-a", "same-b"))
    reg.register(ImplementationSet("synthetic", "test timings", "synthetic_impl:measure", impls))
    reg.register(ImplementationSet("broken", "fails", "synthetic_impl:broken", (Implementation("x", "", BOTH),)))
    return reg


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    path = tmp_path / "workers.log"
    monkeypatch.setenv("SYNTHETIC_PERF_LOG", str(path))
    return path


def ctx(**kw: Any) -> RunContext:
    return RunContext(host=HostCapabilities(frozenset({"cpu"})), options={REGISTRY_OPTION: registry()}, **kw)


def item(tmp_path: Path, **fields: Any) -> GateItem:
    params: dict[str, Any] = {
        "implementation_set": "synthetic",
        "candidate": "fast",
        "baseline": "slow",
        "metric": "decode_tokens_per_s",
        "batch": 16,
        "suffix": 128,
        "shape": {"id": "tiny", "batches": [1, 16], "suffixes": [128]},
        "thresholds": {"decode_tokens_per_s": 1.0, "ttft_proxy_ms": 1.0},
        "timing": {"repetitions": 7, "worker_timeout_s": 120.0},
    }
    params.update(fields)
    p = PerfNonRegressionParams.model_validate(params)
    name = f"g[{p.candidate}-{p.baseline}-{p.metric}-{p.batch}]"
    gf = GateFile(str(tmp_path / "g.yaml"), "0" * 64, "perf-test", 1, None, {}, tmp_path)
    return GateItem(name, "g", None, {}, "perf_nonregression", p, (), "test", gf, SourceLocation("g.yaml", 1, 1))


def workers(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_one_worker_per_implementation_serves_every_cell(tmp_path: Path, log: Path) -> None:
    c = ctx()
    outcomes = [
        run(item(tmp_path, metric=m, batch=b), c) for m in ("decode_tokens_per_s", "ttft_proxy_ms") for b in (1, 16)
    ]
    assert all(o.passed for o in outcomes)
    assert sorted(w.split()[0] for w in workers(log)) == ["fast", "slow"]
    m = outcomes[0].measurements
    assert m["candidate"] == "fast" and m["baseline"] == "slow" and m["metric"] == "decode_tokens_per_s"
    assert len(m["candidate_samples"]) == 7 and m["ratio"] == pytest.approx(1.5, rel=0.05)
    assert m["bytes_moved"] == {"candidate": 1000, "baseline": 1000}
    assert outcomes[2].measurements["direction"] == "lower" and outcomes[2].checks[0].operator == "<="
    assert outcomes[0].tables and outcomes[0].tables[0].rows[0][0] == "decode_tokens_per_s"


def test_slowed_candidate_is_flagged_as_a_regression(tmp_path: Path, log: Path) -> None:
    c = ctx()
    slowed = {"candidate": "fast", "baseline": "fast", "candidate_options": {"redundant_launches": 2}}
    tok = run(item(tmp_path, **slowed), c)
    ttft = run(item(tmp_path, metric="ttft_proxy_ms", **slowed), c)
    assert not tok.passed and tok.checks[0].outcome == "fail" and tok.measurements["ratio"] < 0.6
    assert not ttft.passed and ttft.checks[0].outcome == "fail" and ttft.measurements["ratio"] > 1.8
    assert tok.measurements["candidate"] == "fast[redundant_launches=2]"
    assert len(workers(log)) == 2  # the slowed and the plain candidate are different processes


def test_noise_is_inconclusive_and_fails_under_strict(tmp_path: Path, log: Path) -> None:
    noisy = {"candidate": "same-a", "baseline": "same-b", "timing": {"repetitions": 25}}
    plain = run(item(tmp_path, **noisy), ctx())
    assert plain.measurements["decision"] == "inconclusive"
    assert plain.checks[0].outcome == "inconclusive" and not plain.passed
    assert any("inconclusive" in n for n in plain.notes)
    strict = run(item(tmp_path, **noisy), ctx(strict=True))
    assert strict.measurements["decision"] == "inconclusive" and strict.checks[0].outcome == "fail"


def test_a_failing_worker_is_reported_with_its_output_and_started_once(tmp_path: Path, log: Path) -> None:
    c = ctx()
    bad = {
        "implementation_set": "broken",
        "candidate": "x",
        "baseline": "x",
        "candidate_options": {"redundant_launches": 2},
    }
    for metric in ("decode_tokens_per_s", "ttft_proxy_ms"):
        with pytest.raises(QualifyError, match="synthetic worker failure"):
            run(item(tmp_path, metric=metric, **bad), c)
    assert workers(log) == ["broken x"]


# -- release baseline -----------------------------------------------------------------------------------
def signed_release(tmp_path: Path, c: RunContext, cells: list[GateItem]) -> tuple[Path, Path]:
    items = [
        {"name": it.name, "kind": "perf_nonregression", "status": "passed", "measurements": run(it, c).measurements}
        for it in cells
    ]
    keys = generate_keypair(tmp_path / "keys")
    report = json.loads(json.dumps({"verdict": "PASS", "items": items}))
    _, envelope = sign_report(report, [], load_private_key(keys.private))
    path = tmp_path / "release.dsse.json"
    path.write_bytes(envelope)
    return path, keys.public


def test_release_baseline_passes_unchanged_and_flags_a_slowed_candidate(
    tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    envelope, public = signed_release(tmp_path, ctx(), [item(tmp_path, metric=m) for m in METRICS])
    monkeypatch.setenv("QUALIFY_BASELINE_PUBLIC_KEY", str(public))
    release = {"baseline": "release", "thresholds": {"decode_tokens_per_s": 0.97, "ttft_proxy_ms": 1.03}}
    now = ctx(baseline=envelope)
    same = run(item(tmp_path, **release), now)
    assert same.passed and same.measurements["baseline"] == "release:fast"
    assert same.measurements["baseline_source"] == str(envelope)
    ttft = run(item(tmp_path, metric="ttft_proxy_ms", **release), now)
    assert ttft.passed
    # A slowed build has no cell in the release report (other options): refused, not compared with another.
    with pytest.raises(QualifyError, match="no measured perf cell"):
        run(item(tmp_path, candidate_options={"redundant_launches": 2}, **release), now)


def test_release_slowdown_is_a_regression(tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    envelope, public = signed_release(tmp_path, ctx(), [item(tmp_path)])
    monkeypatch.setenv("QUALIFY_BASELINE_PUBLIC_KEY", str(public))
    # Today's build of the same implementation, same options, runs every step 1.5x slower.
    reg = ImplementationRegistry()
    reg.register(
        ImplementationSet("synthetic", "", "synthetic_impl:measure_regressed", (Implementation("fast", "", BOTH),))
    )
    now = RunContext(host=HostCapabilities(frozenset({"cpu"})), options={REGISTRY_OPTION: reg}, baseline=envelope)
    out = run(item(tmp_path, baseline="release", thresholds={"decode_tokens_per_s": 0.97}), now)
    assert not out.passed and out.checks[0].outcome == "fail"
    assert out.measurements["ratio"] == pytest.approx(1 / 1.5, rel=0.05)


def test_release_baseline_is_verified_before_use(tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    envelope, public = signed_release(tmp_path, ctx(), [item(tmp_path)])
    release = {"baseline": "release", "thresholds": {"decode_tokens_per_s": 0.97}}
    with pytest.raises(QualifyError, match="pass --baseline"):
        run(item(tmp_path, **release), ctx())
    monkeypatch.delenv("QUALIFY_BASELINE_PUBLIC_KEY", raising=False)
    with pytest.raises(QualifyError, match="QUALIFY_BASELINE_PUBLIC_KEY"):
        run(item(tmp_path, **release), ctx(baseline=envelope))
    other = generate_keypair(tmp_path / "other")
    monkeypatch.setenv("QUALIFY_BASELINE_PUBLIC_KEY", str(other.public))
    with pytest.raises(QualifyError, match=f"baseline report {envelope}"):
        run(item(tmp_path, **release), ctx(baseline=envelope))
    # The gate's own key field wins over the environment.
    assert run(item(tmp_path, baseline_public_key=str(public), **release), ctx(baseline=envelope)).passed
    tampered = tmp_path / "tampered.dsse.json"
    env = json.loads(envelope.read_text())
    env["payload"] = env["payload"][:-8] + ("A" * 8 if not env["payload"].endswith("A" * 8) else "B" * 8)
    tampered.write_text(json.dumps(env))
    monkeypatch.setenv("QUALIFY_BASELINE_PUBLIC_KEY", str(public))
    with pytest.raises(QualifyError, match=f"baseline report {tampered}"):
        run(item(tmp_path, **release), ctx(baseline=tampered))
