"""The perf_nonregression runner end to end on CPU, with a synthetic implementation set measured in real
worker subprocesses: `timing.processes` interleaved processes per implementation, a slowed candidate flagged,
noise inconclusive, and the release baseline read only from a verified signed report."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from qualify.compile import GateFile, GateItem
from qualify.context import RunContext
from qualify.errors import QualifyError, SourceLocation
from qualify.host import HostCapabilities
from qualify.kinds.perf_nonregression import runner as perf_runner
from qualify.kinds.perf_nonregression.measurements import PerSide
from qualify.kinds.perf_nonregression.params import PerfNonRegressionParams
from qualify.kinds.perf_nonregression.runner import REGISTRY_OPTION, run
from qualify.perf.implementations import Implementation, ImplementationRegistry, ImplementationSet
from qualify.perf.ncu import range_name
from qualify.signing import sign_report
from qualify.signing.keys import generate_keypair, load_private_key

HERE = Path(__file__).parent
BOTH = frozenset({"decode_tokens_per_s", "ttft_proxy_ms"})  # the kernel-level metrics the synthetic set times


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
    kw.setdefault("host", HostCapabilities(frozenset({"cpu"})))
    return RunContext(options={REGISTRY_OPTION: registry()}, **kw)


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


def test_processes_per_implementation_serve_every_cell_interleaved(tmp_path: Path, log: Path) -> None:
    c = ctx()
    outcomes = [
        run(item(tmp_path, metric=m, batch=b), c) for m in ("decode_tokens_per_s", "ttft_proxy_ms") for b in (1, 16)
    ]
    assert all(o.passed for o in outcomes)
    # 3 fresh processes per implementation (the default), candidate and baseline alternating, shared by all items.
    started = [(w.split()[0], w.split()[-1]) for w in workers(log)]
    assert started == [("fast", "p0"), ("slow", "p0"), ("fast", "p1"), ("slow", "p1"), ("fast", "p2"), ("slow", "p2")]
    m = outcomes[0].measurements.model_dump(mode="json")
    assert m["candidate"] == "fast" and m["baseline"] == "slow" and m["metric"] == "decode_tokens_per_s"
    assert m["processes"] == {"candidate": 3, "baseline": 3}
    groups = m["candidate_process_samples"]
    assert [len(g) for g in groups] == [7, 7, 7] and len(m["baseline_process_samples"]) == 3
    assert m["candidate_samples"] == [x for g in groups for x in g]  # the pooled list, for older readers
    assert len({g[0] for g in groups}) == 3  # three different processes, not one result copied
    assert m["ratio"] == pytest.approx(1.5, rel=0.05)
    assert len(m["clocks"]["candidate"]) == 3 and len(m["candidate_worker_wall_s"]) == 3
    check = outcomes[0].checks[0]
    assert "process-level Welch t interval (df " in check.statistic
    assert "on the log medians of 3 processes x 7 repetitions per side" in check.statistic
    assert m["ci_method"] == "process-t" and m["ci_fallback"] is None and 2.0 <= m["ci_df"] <= 4.0
    assert check.n == 3
    assert m["bytes_moved"] == {"candidate": 1000, "baseline": 1000}
    assert outcomes[2].measurements.direction == "lower" and outcomes[2].checks[0].operator == "<="
    assert outcomes[0].tables and outcomes[0].tables[0].rows[0][0] == "decode_tokens_per_s"


def test_a_rotation_runs_every_layout_in_a_latin_square_and_other_gates_reuse_it(tmp_path: Path, log: Path) -> None:
    c = ctx()
    rotation = ["slow", "same-a", "fast"]
    timing = {"repetitions": 3, "processes": 3, "worker_timeout_s": 120.0}
    first = run(item(tmp_path, rotation=rotation, timing=timing), c)
    started = [(w.split()[0], w.split()[-1]) for w in workers(log)]
    # Process k runs the list rotated by k: every layout takes every position once.
    assert started == [("slow", "p0"), ("same-a", "p0"), ("fast", "p0"),
                       ("same-a", "p1"), ("fast", "p1"), ("slow", "p1"),
                       ("fast", "p2"), ("slow", "p2"), ("same-a", "p2")]  # fmt: skip
    assert first.passed and first.measurements.ratio == pytest.approx(1.5, rel=0.05)
    assert "Latin square" in first.measurements.baseline_source
    # A second gate comparing two other members of the rotation starts nothing new.
    second = run(item(tmp_path, candidate="same-a", baseline="slow", rotation=rotation, timing=timing), c)
    assert len(workers(log)) == 9 and second.measurements.candidate == "same-a"


@pytest.mark.parametrize(
    ("rotation", "match"),
    [(["fast", "same-a"], "must name the candidate and baseline"), (["fast", "slow", "fast"], "twice"),
     (["fast", "slow", "nope"], "not in the synthetic set")],
)  # fmt: skip
def test_a_bad_rotation_is_a_lint_error(tmp_path: Path, rotation: list[str], match: str) -> None:
    from qualify.kinds.perf_nonregression.params import lint

    p = PerfNonRegressionParams.model_validate({
        "implementation_set": "engine", "candidate": "shared-k16v8", "baseline": "bf16-prefix-cached",
        "metric": "output_tokens_per_s", "batch": 1, "suffix": 64,
        "shape": {"id": "t", "batches": [1], "suffixes": [64]},
        "thresholds": {"output_tokens_per_s": 1.0},
        "rotation": [{"fast": "shared-k16v8", "slow": "bf16-prefix-cached", "same-a": "bf16-inject"}.get(n, n)
                     for n in rotation],
    })  # fmt: skip
    issues = lint(p, None)
    assert any(match.replace("synthetic", "engine") in i.message for i in issues), issues


def test_each_item_records_the_kernel_its_own_cell_launched(tmp_path: Path, log: Path) -> None:
    # The workers build batch 1 first; the batch-16 item must not carry batch 1's kernel identity.
    c = ctx()
    got = {b: run(item(tmp_path, batch=b), c).measurements.model_dump()["kernel_identity"] for b in (16, 1)}
    assert got == {16: {"config": {"batch": 16}}, 1: {"config": {"batch": 1}}}


def test_slowed_candidate_is_flagged_as_a_regression(tmp_path: Path, log: Path) -> None:
    c = ctx()
    slowed = {"candidate": "fast", "baseline": "fast", "candidate_options": {"redundant_launches": 2}}
    tok = run(item(tmp_path, **slowed), c)
    ttft = run(item(tmp_path, metric="ttft_proxy_ms", **slowed), c)
    assert not tok.passed and tok.checks[0].outcome == "fail" and tok.measurements.ratio < 0.6
    assert not ttft.passed and ttft.checks[0].outcome == "fail" and ttft.measurements.ratio > 1.8
    assert tok.measurements.candidate == "fast[redundant_launches=2]"
    assert len(workers(log)) == 6  # the slowed and the plain candidate are different processes, 3 each


def test_noise_is_inconclusive_and_fails_under_strict(tmp_path: Path, log: Path) -> None:
    noisy = {"candidate": "same-a", "baseline": "same-b", "timing": {"repetitions": 25}}
    plain = run(item(tmp_path, **noisy), ctx())
    assert plain.measurements.decision == "inconclusive"
    assert plain.checks[0].outcome == "inconclusive" and not plain.passed
    assert any("inconclusive" in n for n in plain.notes)
    strict = run(item(tmp_path, **noisy), ctx(strict=True))
    assert strict.measurements.decision == "inconclusive" and strict.checks[0].outcome == "fail"


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


def test_the_process_count_is_the_gates_and_processes_are_shared_across_gates(tmp_path: Path, log: Path) -> None:
    c = ctx()
    two = run(item(tmp_path, timing={"repetitions": 6, "processes": 2}), c)
    assert two.measurements.processes == PerSide(candidate=2, baseline=2)
    assert "2 processes x 6 repetitions" in two.checks[0].statistic
    assert len(workers(log)) == 4
    # Another gate with the same measurement and 4 processes reuses processes 0 and 1 and starts 2 and 3.
    four = run(item(tmp_path, timing={"repetitions": 6, "processes": 4}, thresholds={"decode_tokens_per_s": 1.2}), c)
    assert four.measurements.processes == PerSide(candidate=4, baseline=4)
    assert [w.split()[-1] for w in workers(log)[4:]] == ["p2", "p2", "p3", "p3"]
    assert four.measurements.candidate_process_samples[:2] == two.measurements.candidate_process_samples
    assert four.measurements.baseline_process_samples[:2] == two.measurements.baseline_process_samples


def test_the_two_level_bootstrap_is_selectable_and_reuses_the_same_processes(tmp_path: Path, log: Path) -> None:
    c = ctx()
    t = run(item(tmp_path), c)
    boot = run(item(tmp_path, timing={"repetitions": 7, "ci_method": "two-level-bootstrap"}), c)
    assert len(workers(log)) == 6  # the CI method is statistics only: the same 3 + 3 processes serve both
    assert t.measurements.candidate_process_samples == boot.measurements.candidate_process_samples
    assert boot.measurements.ci_method == "two-level-bootstrap" and boot.measurements.ci_df is None
    assert "percentile two-level bootstrap over 3 processes x 7 repetitions per side" in boot.checks[0].statistic
    assert boot.passed and t.passed and boot.measurements.ratio == t.measurements.ratio
    with pytest.raises(ValueError, match="ci_method"):
        item(tmp_path, timing={"ci_method": "bca"})


def test_one_process_falls_back_to_the_flat_bootstrap_and_says_so(tmp_path: Path, log: Path) -> None:
    out = run(item(tmp_path, timing={"repetitions": 7, "processes": 1}), ctx())
    assert [w.split()[0] for w in workers(log)] == ["fast", "slow"]
    assert out.measurements.processes == PerSide(candidate=1, baseline=1) and out.checks[0].n == 7
    assert "flat bootstrap over the repetitions of one process per side" in out.checks[0].statistic
    assert "process-t not used: one process per side" in out.checks[0].statistic
    assert out.measurements.ci_method == "flat-bootstrap" and out.measurements.ci_method_requested == "process-t"
    assert any("timing.processes is 1" in n and "t interval needs 2 or more" in n for n in out.notes)
    assert out.measurements.baseline_source == "measured in this run (1 fresh process)"


def test_zero_processes_are_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"processes must be at least 1 \(3 or more for a CI that includes"):
        item(tmp_path, timing={"processes": 0})


# -- release baseline -----------------------------------------------------------------------------------
def signed_release(tmp_path: Path, c: RunContext, cells: list[GateItem]) -> tuple[Path, Path]:
    items = [
        {
            "name": it.name,
            "kind": "perf_nonregression",
            "status": "passed",
            "measurements": run(it, c).measurements.model_dump(mode="json"),
        }
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
    envelope, public = signed_release(tmp_path, ctx(), [item(tmp_path, metric=m) for m in sorted(BOTH)])
    monkeypatch.setenv("QUALIFY_BASELINE_PUBLIC_KEY", str(public))
    release = {"baseline": "release", "thresholds": {"decode_tokens_per_s": 0.97, "ttft_proxy_ms": 1.03}}
    now = ctx(baseline=envelope)
    same = run(item(tmp_path, **release), now)
    assert same.passed and same.measurements.baseline == "release:fast"
    assert same.measurements.baseline_source == str(envelope)
    ttft = run(item(tmp_path, metric="ttft_proxy_ms", **release), now)
    assert ttft.passed
    # A slowed build has no cell in the release report (other options): refused, not compared with another.
    with pytest.raises(QualifyError, match="no measured perf cell"):
        run(item(tmp_path, candidate_options={"redundant_launches": 2}, **release), now)


def test_a_release_report_without_process_samples_is_read_as_one_process(
    tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = ctx()
    cell = item(tmp_path)
    measured = run(cell, c).measurements.model_dump(mode="json")
    # What a report written before processes were recorded holds: the pooled samples of one process only.
    legacy = {k: v for k, v in measured.items() if not k.endswith("_process_samples") and k != "processes"}
    legacy["candidate_samples"] = measured["candidate_process_samples"][0]
    keys = generate_keypair(tmp_path / "keys")
    report = {"verdict": "PASS", "items": [{"name": cell.name, "kind": "perf_nonregression", "measurements": legacy}]}
    _, envelope = sign_report(json.loads(json.dumps(report)), [], load_private_key(keys.private))
    path = tmp_path / "legacy.dsse.json"
    path.write_bytes(envelope)
    monkeypatch.setenv("QUALIFY_BASELINE_PUBLIC_KEY", str(keys.public))
    c.baseline = path
    out = run(item(tmp_path, baseline="release", thresholds={"decode_tokens_per_s": 0.97}), c)
    assert out.measurements.processes == PerSide(candidate=3, baseline=1)
    assert out.measurements.baseline_process_samples == [legacy["candidate_samples"]]
    statistic = out.checks[0].statistic
    assert "two-level bootstrap over 3 processes x 7 repetitions (fast) and 1 process x 7 repetitions" in statistic
    assert "release:fast has one process, so its process-to-process variation is not in this CI" in statistic
    assert "process-t not used: the baseline has one process" in statistic
    assert out.measurements.ci_method == "two-level-bootstrap"
    assert any(n.startswith("ci_method process-t not used: the baseline has one process") for n in out.notes)
    assert any("records no per-process samples" in n for n in out.notes)
    assert out.passed  # the same build: the ratio is about 1


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
    assert out.measurements.ratio == pytest.approx(1 / 1.5, rel=0.05)


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


def test_the_variants_a_signed_baseline_dispatched_count_as_dispatched_by_the_comparing_item(
    tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A release report of format 3 lists the specializations each perf item dispatched; comparing with it vouches
    # for them only if this run's numerics qualified them, so the comparing item carries them into the coverage.
    c = ctx()
    cell = item(tmp_path)
    spec = "decode/bfloat16/g4/d128/p8/causal/cv-float8_e4m3fn/lv-bfloat16/m16n128r2w4s3"
    measured = run(cell, c).measurements.model_dump(mode="json")
    keys = generate_keypair(tmp_path / "keys")
    released = {"name": cell.name, "kind": "perf_nonregression", "measurements": measured,
                "specializations": {"qualified": [], "dispatched": [spec]}}  # fmt: skip
    _, envelope = sign_report({"verdict": "PASS", "items": [released]}, [], load_private_key(keys.private))
    path = tmp_path / "release.dsse.json"
    path.write_bytes(envelope)
    monkeypatch.setenv("QUALIFY_BASELINE_PUBLIC_KEY", str(keys.public))
    c.baseline = path
    out = run(item(tmp_path, baseline="release", thresholds={"decode_tokens_per_s": 0.97}), c)
    assert spec in out.dispatches


def test_hardware_counters_profile_both_sides_once_per_implementation(
    tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiled: list[str] = []

    def fake_profile(request: Any, *, timeout_s: float) -> dict[str, Any]:
        assert request.profile
        profiled.append(request.implementation)
        if request.implementation == "slow":
            raise QualifyError("ncu exit 9: the baseline's profile broke")
        cells = {range_name("decode_tokens_per_s", b, 128): {"kernels": 1, "dram_bytes": b} for b in (1, 16)}
        return {"metrics": ["dram__bytes.sum"], "missing": [], "by_cell": cells}

    monkeypatch.setattr(perf_runner, "run_profiled", fake_profile)
    c = ctx(host=HostCapabilities(frozenset({"cpu", "ncu"})))
    out = {b: run(item(tmp_path, batch=b, hardware_counters=True), c) for b in (1, 16)}
    counters = {b: o.measurements.model_dump()["ncu"] for b, o in out.items()}
    assert counters[16]["cell"] == {"kernels": 1, "dram_bytes": 16} and counters[1]["cell"]["dram_bytes"] == 1
    assert counters[16]["baseline_cell"] is None  # the failure is said, not hidden, and the timing stands
    assert any("profiling of the baseline failed" in n and "ncu exit 9" in n for n in out[16].notes)
    assert out[16].passed
    # One profile per implementation and shape, shared by the items (a failed one is not retried either).
    assert sorted(profiled) == ["fast", "slow"]

    def fake_both(request: Any, *, timeout_s: float) -> dict[str, Any]:
        key = range_name("decode_tokens_per_s", 16, 128)
        return {"metrics": [], "missing": [], "by_cell": {key: {"side": request.implementation}}}

    monkeypatch.setattr(perf_runner, "run_profiled", fake_both)
    got = run(item(tmp_path, hardware_counters=True), ctx(host=HostCapabilities(frozenset({"cpu", "ncu"}))))
    ncu = got.measurements.model_dump()["ncu"]
    assert (ncu["cell"], ncu["baseline_cell"]) == ({"side": "fast"}, {"side": "slow"})
    assert ncu["scope"].startswith("one call of one layer of each side")

    def candidate_fails(request: Any, *, timeout_s: float) -> dict[str, Any]:
        if request.implementation == "fast":
            raise QualifyError("ncu exit 3: the candidate's profile broke")
        return fake_both(request, timeout_s=timeout_s)

    monkeypatch.setattr(perf_runner, "run_profiled", candidate_fails)
    got = run(item(tmp_path, hardware_counters=True), ctx(host=HostCapabilities(frozenset({"cpu", "ncu"}))))
    ncu = got.measurements.model_dump()["ncu"]
    assert ncu["cell"] is None and ncu["baseline_cell"] == {"side": "slow"}  # the baseline's counters still come
    assert any("profiling of the candidate failed" in n for n in got.notes)
