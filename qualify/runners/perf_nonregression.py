"""Run one `perf_nonregression` item.

Each implementation is measured once per session in a fresh worker process over the gate's whole shape set
(every batch and suffix, both metrics), memoized with `ctx.memo`, so the items of several gates share it.

Measurements (what `qualify render` plots):
    {"metric", "batch", "suffix", "candidate", "baseline", "ratio", "ci_low", "ci_high", "confidence",
     "threshold", "direction", "decision", "outcome", "candidate_samples", "baseline_samples",
     "candidate_median", "baseline_median", "unit", "bytes_moved": {"candidate", "baseline"},
     "pct_peak_bw": {"candidate", "baseline"}, "clocks": {"candidate", "baseline"},
     "timing_method": {...}, "ncu": {...} | None, "implementation_set", "candidate_options", "shape",
     "live", "gpu", "versions", "kernel_identity", "baseline_source"}

`decision` is the statistical decision (pass / fail / inconclusive); `outcome` is the Check's outcome, which
equals it except that an inconclusive decision is a fail under --strict. Either way an inconclusive item
does not pass, so the plugin reports it FAILED and the verdict is FAIL; the measurements say it was noise.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from qualify.compile import GateItem
from qualify.errors import QualifyError
from qualify.kinds.perf_nonregression import PerfNonRegressionParams
from qualify.perf.baseline_report import find_candidate_cell, load_verified_report, public_key_path
from qualify.perf.compare import CellKey, Side, compare_cell
from qualify.perf.implementations import RELEASE, ImplementationRegistry, default_implementations
from qualify.perf.launch import run_profiled, run_worker
from qualify.perf.metrics import metric
from qualify.perf.ncu import range_name
from qualify.perf.spec import ImplementationOptions, WorkRequest, WorkResult
from qualify.results import ItemOutcome
from qualify.runners.context import RunContext

REGISTRY_OPTION = "perf_implementations"  # ctx.options key: another ImplementationRegistry (tests)


def _registry(ctx: RunContext) -> ImplementationRegistry:
    registry = ctx.options.get(REGISTRY_OPTION)
    return registry if isinstance(registry, ImplementationRegistry) else default_implementations()


def _request(registry: ImplementationRegistry, p: PerfNonRegressionParams, name: str, options: ImplementationOptions,
             seed: int) -> WorkRequest:  # fmt: skip
    impl_set = registry.get_set(p.implementation_set)
    impl = impl_set.get(name)
    # Only what changes the measurement goes into the request (and so the memo key): gates that differ in
    # thresholds or statistics share one worker result.
    timing = p.timing.model_dump(include={"warmups", "repetitions", "l2_cold", "cuda_graph"})
    return WorkRequest(
        implementation_set=impl_set.name,
        implementation=impl.name,
        measure=impl_set.measure,
        options=options.model_dump(),
        metrics=sorted(impl.metrics),  # type: ignore[arg-type]
        shape=p.shape.model_dump(),
        timing=timing,
        seed=seed,
    )


def _memo_call(ctx: RunContext, key: tuple[Any, ...], fn: Any) -> Any:
    """ctx.memo that also remembers a failure, so a broken worker is started once, not once per item."""

    def factory() -> Any:
        try:
            return fn()
        except QualifyError as exc:
            return exc

    value = ctx.memo(key, factory)
    if isinstance(value, QualifyError):
        raise value
    return value


def _measured(ctx: RunContext, request: WorkRequest, timeout_s: float) -> WorkResult:
    return _memo_call(ctx, ("perf-worker", request.model_dump_json()), lambda: run_worker(request, timeout_s=timeout_s))


def _side(result: WorkResult, p: PerfNonRegressionParams, label: str) -> tuple[Side, Any]:
    cell = result.cell(p.metric, p.batch, p.suffix)
    side = Side(
        name=label,
        samples=cell.samples,
        bytes_moved=cell.bytes_moved,
        pct_peak_bw=cell.pct_peak_bw,
        clocks=result.clocks,
        method=cell.method,
    )
    return side, cell


def _label(name: str, options: ImplementationOptions) -> str:
    extra = {k: v for k, v in options.model_dump().items() if v != ImplementationOptions.model_fields[k].default}
    return name + "".join(f"[{k}={v}]" for k, v in extra.items())


def _release_side(item: GateItem, ctx: RunContext, p: PerfNonRegressionParams) -> Side:
    if ctx.baseline is None:
        raise QualifyError(
            f"{item.name} compares against the last release's signed report: pass --baseline PATH.dsse.json "
            "(or deselect it, e.g. -k 'not release')"
        )
    key_path = public_key_path(item.gate_file.resolve(p.baseline_public_key) if p.baseline_public_key else None)
    envelope = Path(ctx.baseline)
    report = _memo_call(
        ctx, ("perf-release", str(envelope), str(key_path)), lambda: load_verified_report(envelope, key_path)
    )
    want = {
        "implementation_set": p.implementation_set,
        "candidate": _label(p.candidate, p.candidate_options),
        "candidate_options": p.candidate_options.model_dump(),
        "shape": p.shape.model_dump(),
        "metric": p.metric,
        "batch": p.batch,
        "suffix": p.suffix,
    }
    m = find_candidate_cell(report, envelope, want)
    return Side(
        name=f"{RELEASE}:{want['candidate']}",
        samples=[float(x) for x in m["candidate_samples"]],
        bytes_moved=(m.get("bytes_moved") or {}).get("candidate"),
        pct_peak_bw=(m.get("pct_peak_bw") or {}).get("candidate"),
        clocks=(m.get("clocks") or {}).get("candidate"),
        method=(m.get("timing_method") or {}).get("candidate"),
    )


def _counters(ctx: RunContext, request: WorkRequest, p: PerfNonRegressionParams) -> tuple[dict[str, Any] | None, str]:
    if not p.hardware_counters:
        return None, ""
    if not ctx.host.available.__contains__("ncu"):
        return None, "hardware_counters: ncu is not on PATH on this host; no counters collected"
    profile = request.model_copy(update={"profile": True})
    try:
        counters = _memo_call(
            ctx,
            ("perf-ncu", profile.model_dump_json()),
            lambda: run_profiled(profile, timeout_s=p.timing.worker_timeout_s),
        )
    except QualifyError as exc:
        return None, f"hardware_counters: ncu profiling failed: {exc.diagnostics()[:500]}"
    cell = counters["by_cell"].get(range_name(p.metric, p.batch, p.suffix))
    note = "" if cell else "hardware_counters: ncu reported no kernels for this cell (see ncu.unattributed)"
    return {
        "metrics": counters["metrics"],
        "cell": cell,
        "unattributed": counters["by_cell"].get("unattributed"),
        "scope": "one call of one layer of the candidate, clocks not controlled",
    }, note


def _seed(ctx: RunContext, item: GateItem) -> int:
    digest = hashlib.sha256(f"{ctx.seed}:{item.gate_file.suite}:{item.name}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def run(item: GateItem, ctx: RunContext) -> ItemOutcome:
    p = item.params
    assert isinstance(p, PerfNonRegressionParams)
    registry = _registry(ctx)
    m = metric(p.metric)
    timeout = p.timing.worker_timeout_s
    cand_request = _request(registry, p, p.candidate, p.candidate_options, ctx.seed)
    cand_result = _measured(ctx, cand_request, timeout)
    candidate, cand_cell = _side(cand_result, p, _label(p.candidate, p.candidate_options))
    notes = [m.description]
    if p.baseline == RELEASE:
        baseline = _release_side(item, ctx, p)
        source = str(ctx.baseline)
    else:
        base_result = _measured(ctx, _request(registry, p, p.baseline, p.baseline_options, ctx.seed), timeout)
        baseline, _ = _side(base_result, p, _label(p.baseline, p.baseline_options))
        source = "measured in this run (fresh process)"
    comparison = compare_cell(
        CellKey(m, p.batch, p.suffix),
        candidate,
        baseline,
        p.thresholds[p.metric],
        confidence=p.timing.confidence,
        n_resamples=p.timing.n_resamples,
        seed=_seed(ctx, item),
        strict=ctx.strict,
    )
    measurements = dict(comparison.measurements)
    counters, ncu_note = _counters(ctx, cand_request, p)
    measurements.update(
        {
            "ncu": counters,
            "implementation_set": p.implementation_set,
            "candidate_options": p.candidate_options.model_dump(),
            "shape": p.shape.model_dump(),
            "live": cand_cell.live,
            "gpu": cand_result.gpu,
            "versions": cand_result.versions,
            "kernel_identity": cand_result.identity,
            "peak_bandwidth_tbps": cand_result.peak_bandwidth_tbps,
            "baseline_source": source,
            "candidate_worker_wall_s": cand_result.wall_s,
        }
    )
    decision = measurements["decision"]
    if decision == "inconclusive":
        notes.append(
            "inconclusive: the CI straddles the threshold (timing noise); not a pass"
            + (" - a failure under --strict" if ctx.strict else "; more repetitions would narrow it")
        )
    notes += [n for n in (ncu_note,) if n]
    notes += [f"{candidate.name}: {cand_cell.method}"]
    return ItemOutcome(
        checks=[comparison.check],
        measurements=measurements,
        tables=[comparison.table],
        parameters=p.model_dump(mode="json"),
        notes=notes,
    )
