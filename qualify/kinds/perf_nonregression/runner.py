"""Run one `perf_nonregression` item.

Each implementation is measured in `timing.processes` fresh worker processes, each over the gate's whole shape
set (every batch and suffix, both metrics); every process's result is memoized with `ctx.memo` under its
request (which carries the process index), so the items of several gates share them. The CI is taken over
those processes as `timing.ci_method` says: a process-level Welch t interval by default, or the two-level
bootstrap (`qualify.perf.compare`).

Measurements: `PerfNonRegressionMeasurements` (what `qualify render` plots); the threshold is the check's.

`decision` is the statistical decision (pass / fail / inconclusive); `outcome` is the Check's outcome, which
equals it except that an inconclusive decision is a fail under --strict. Either way an inconclusive item
does not pass, so the plugin reports it FAILED and the verdict is FAIL; the measurements say it was noise.
"""

from __future__ import annotations

import hashlib
import statistics
from pathlib import Path
from typing import Any

from qualify.compile import GateItem
from qualify.context import RunContext
from qualify.errors import QualifyError
from qualify.kinds.perf_nonregression.measurements import PerfNonRegressionMeasurements
from qualify.kinds.perf_nonregression.params import PerfNonRegressionParams
from qualify.perf.baseline_report import baseline_dispatches, find_candidate_item, load_verified_report, public_key_path
from qualify.perf.compare import CellKey, Side, compare_cell
from qualify.perf.implementations import RELEASE, ImplementationRegistry, default_implementations
from qualify.perf.launch import run_profiled, run_worker
from qualify.perf.metrics import metric
from qualify.perf.ncu import range_name
from qualify.perf.spec import Cell, ImplementationOptions, WorkRequest, WorkResult
from qualify.results import ItemOutcome

REGISTRY_OPTION = "perf_implementations"  # ctx.options key: another ImplementationRegistry (tests)


def _registry(ctx: RunContext) -> ImplementationRegistry:
    registry = ctx.options.get(REGISTRY_OPTION)
    return registry if isinstance(registry, ImplementationRegistry) else default_implementations()


def _request(registry: ImplementationRegistry, p: PerfNonRegressionParams, name: str, options: ImplementationOptions,
             seed: int, process: int = 0) -> WorkRequest:  # fmt: skip
    impl_set = registry.get_set(p.implementation_set)
    impl = impl_set.get(name)
    # Only what changes the measurement goes into the request (and so the memo key): gates that differ in
    # thresholds or statistics share worker results. `processes` is not in it, but the process index is:
    # a gate with 5 processes reuses the first 3 of one with 3.
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
        process=process,
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


def _measure_sides(ctx: RunContext, requests: list[list[WorkRequest]], timeout_s: float) -> list[list[WorkResult]]:
    """One result per process for each side (`requests[side][process]`), launched interleaved: candidate
    process 0, baseline process 0, candidate process 1, ...

    Interleaving spreads slow drift over the run (the GPU heating up and lowering its clocks, another tenant's
    load, host state) over both sides alike, instead of timing every candidate process early and every
    baseline process late, where a trend would read as a difference between the implementations. Processes
    already memoized by an earlier item are reused as they are, so only sides measured fresh by this item
    are interleaved.
    """
    results: list[list[WorkResult]] = [[] for _ in requests]
    total, done = sum(len(r) for r in requests), 0
    for process in range(max(len(r) for r in requests)):
        for side, reqs in enumerate(requests):
            if process < len(reqs):
                ctx.progress("worker processes", done, total)
                results[side].append(_measured(ctx, reqs[process], timeout_s))
                done += 1
    ctx.progress("worker processes", done, total)
    return results


def latin_square(names: list[str], processes: int) -> list[list[str]]:
    """The measurement order of each process: process k runs `names` rotated left by k (a cyclic Latin square
    when there are as many processes as names; every name takes every position once per len(names) processes)."""
    n = len(names)
    return [names[k % n :] + names[: k % n] for k in range(processes)]


def _measure_rotation(
    ctx: RunContext, requests: dict[str, list[WorkRequest]], order: list[str], timeout_s: float
) -> dict[str, list[WorkResult]]:
    """One result per process of every rotated implementation, launched in the Latin-square order."""
    processes = len(next(iter(requests.values())))
    results: dict[str, list[WorkResult]] = {name: [] for name in order}
    total, done = len(order) * processes, 0
    for k, names in enumerate(latin_square(order, processes)):
        for name in names:
            ctx.progress("worker processes", done, total)
            results[name].append(_measured(ctx, requests[name][k], timeout_s))
            done += 1
    ctx.progress("worker processes", done, total)
    return results


def _side(results: list[WorkResult], p: PerfNonRegressionParams, label: str) -> tuple[Side, Any]:
    cells = [r.cell(p.metric, p.batch, p.suffix, p.stream) for r in results]
    pct = [c.pct_peak_bw for c in cells if c.pct_peak_bw is not None]
    side = Side(
        name=label,
        groups=[list(c.samples) for c in cells],
        bytes_moved=cells[0].bytes_moved,  # a function of the shape: the same in every process
        pct_peak_bw=statistics.median(pct) if pct else None,
        clocks=[r.clocks for r in results],
        method="; ".join(dict.fromkeys(c.method for c in cells)),
    )
    return side, cells[0]


def _label(name: str, options: ImplementationOptions) -> str:
    extra = {k: v for k, v in options.model_dump().items() if v != ImplementationOptions.model_fields[k].default}
    return name + "".join(f"[{k}={v}]" for k, v in extra.items())


def _release_side(item: GateItem, ctx: RunContext, p: PerfNonRegressionParams) -> tuple[Side, str, list[str]]:
    """The candidate's samples in the signed release report, grouped by process when the report records
    that (a report written before processes were recorded gives one group: it measured one process), and the
    kernel specializations that item dispatched."""
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
    if p.stream is not None:  # reports from before named streams hold none
        want["stream"] = p.stream
    base_item = find_candidate_item(report, envelope, want)
    m = base_item.get("measurements") or {}
    grouped = m.get("candidate_process_samples")
    note = ""
    if grouped:
        groups = [[float(x) for x in g] for g in grouped]
    else:
        groups = [[float(x) for x in m["candidate_samples"]]]
        note = (
            f"release baseline: {envelope} records no per-process samples (measured with one process per "
            "implementation); read as one process, so its process-to-process variation is not in the CI"
        )
    side = Side(
        name=f"{RELEASE}:{want['candidate']}",
        groups=groups,
        bytes_moved=(m.get("bytes_moved") or {}).get("candidate"),
        pct_peak_bw=(m.get("pct_peak_bw") or {}).get("candidate"),
        clocks=(m.get("clocks") or {}).get("candidate"),
        method=(m.get("timing_method") or {}).get("candidate"),
    )
    return side, note, baseline_dispatches(base_item)


def _profile(ctx: RunContext, request: WorkRequest, p: PerfNonRegressionParams) -> dict[str, Any]:
    profile = request.model_copy(update={"profile": True})
    counters: dict[str, Any] = _memo_call(
        ctx,
        ("perf-ncu", profile.model_dump_json()),
        lambda: run_profiled(profile, timeout_s=p.timing.worker_timeout_s),
    )
    return counters


def _counters(
    ctx: RunContext, candidate: WorkRequest, baseline: WorkRequest | None, p: PerfNonRegressionParams
) -> tuple[dict[str, Any] | None, str]:
    """The candidate's counters for this item's cell and, when the baseline ran in this run, the baseline's: a
    miss is explained against what the faster kernel does differently (traffic, occupancy, tensor work). Each
    side's profile failing, or finding no kernel of the cell, is said in the note; the other side still counts."""
    if not p.hardware_counters:
        return None, ""
    if "ncu" not in ctx.host.available:
        return None, "hardware_counters: ncu is not on PATH on this host; no counters collected"
    cell_name = range_name(p.metric, p.batch, p.suffix)
    sides = {"": candidate, "baseline_": baseline} if baseline is not None else {"": candidate}
    out: dict[str, Any] = {
        "scope": f"one call of one layer of {'each side' if baseline is not None else 'the candidate'}, "
        "clocks not controlled"
    }
    notes = []
    profiled = False
    for prefix, request in sides.items():
        who = "the baseline" if prefix else "the candidate"
        try:
            counters = _profile(ctx, request, p)
        except QualifyError as exc:
            out[f"{prefix}cell"] = None
            notes.append(f"hardware_counters: ncu profiling of {who} failed: {exc.diagnostics()[:500]}")
            continue
        profiled = True
        out.setdefault("metrics", counters["metrics"])
        out.setdefault("missing", counters.get("missing", []))  # counters this ncu offers under none of their names
        out[f"{prefix}cell"] = counters["by_cell"].get(cell_name)
        out[f"{prefix}unattributed"] = counters["by_cell"].get("unattributed")
        if out[f"{prefix}cell"] is None:
            notes.append(
                f"hardware_counters: ncu reported no kernels of {who} for this cell (see ncu.{prefix}unattributed)"
            )
    return (out if profiled else None), "; ".join(notes)


def _seed(ctx: RunContext, item: GateItem) -> int:
    digest = hashlib.sha256(f"{ctx.seed}:{item.gate_file.suite}:{item.name}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def run(item: GateItem, ctx: RunContext) -> ItemOutcome:
    p = item.params
    assert isinstance(p, PerfNonRegressionParams)
    registry = _registry(ctx)
    m = metric(p.metric)
    timeout = p.timing.worker_timeout_s
    processes = range(p.timing.processes)
    requests = [[_request(registry, p, p.candidate, p.candidate_options, ctx.seed, i) for i in processes]]
    if p.baseline != RELEASE:
        requests.append([_request(registry, p, p.baseline, p.baseline_options, ctx.seed, i) for i in processes])
    if p.rotation:
        options = {p.candidate: p.candidate_options, p.baseline: p.baseline_options}
        rotated = {
            name: [_request(registry, p, name, options.get(name, ImplementationOptions()), ctx.seed, i)
                   for i in processes]
            for name in p.rotation
        }  # fmt: skip
        by_name = _measure_rotation(ctx, rotated, p.rotation, timeout)
        results = [by_name[p.candidate], by_name[p.baseline]]
    else:
        results = _measure_sides(ctx, requests, timeout)
    cand_results = results[0]
    candidate, cand_cell = _side(cand_results, p, _label(p.candidate, p.candidate_options))
    base_cell = None
    released: list[str] = []
    notes = [m.description]
    if p.baseline == RELEASE:
        baseline, release_note, released = _release_side(item, ctx, p)
        notes += [release_note] if release_note else []
        source = str(ctx.baseline)
    else:
        baseline, base_cell = _side(results[1], p, _label(p.baseline, p.baseline_options))
        n = p.timing.processes
        source = f"measured in this run ({n} fresh process{'es, interleaved with the candidate' if n > 1 else ''})"
        if p.rotation:
            source = (f"measured in this run ({n} fresh processes each of {', '.join(p.rotation)}, process k in "
                      "that order rotated by k: a Latin square)")  # fmt: skip
    if p.timing.processes == 1:
        notes.append(
            "timing.processes is 1: one process per implementation, so the CI is the flat bootstrap over its "
            "repetitions (a process-level t interval needs 2 or more) and does not include the "
            "process-to-process variation between runs"
        )
    comparison = compare_cell(
        CellKey(m, p.batch, p.suffix, p.stream),
        candidate,
        baseline,
        p.thresholds[p.metric],
        confidence=p.timing.confidence,
        n_resamples=p.timing.n_resamples,
        seed=_seed(ctx, item),
        strict=ctx.strict,
        ci_method=p.timing.ci_method,
    )
    measurements = dict(comparison.measurements)  # the threshold is the check's alone
    if measurements["ci_fallback"] and p.timing.processes > 1:
        notes.append(
            f"ci_method {p.timing.ci_method} not used: {measurements['ci_fallback']}; the CI is the "
            f"{measurements['ci_method']} instead"
        )
    counters, ncu_note = _counters(ctx, requests[0][0], requests[1][0] if len(requests) > 1 else None, p)
    measurements.update(
        {
            "ncu": counters,
            "implementation_set": p.implementation_set,
            "candidate_options": p.candidate_options.model_dump(),
            "shape": p.shape.model_dump(),
            "live": cand_cell.live,
            "gpu": cand_results[0].gpu,
            "versions": cand_results[0].versions,
            # The kernel this item's cell launched (config, cubin hash); a worker's own identity is that of the
            # first cell it built, which at another batch is another compiled variant.
            "kernel_identity": (cand_cell.detail or {}).get("identity"),
            "peak_bandwidth_tbps": cand_results[0].peak_bandwidth_tbps,
            "baseline_source": source,
            "candidate_worker_wall_s": [r.wall_s for r in cand_results],
        }
    )
    decision = measurements["decision"]
    if decision == "inconclusive":
        notes.append(
            "inconclusive: the CI straddles the threshold (timing noise); not a pass"
            + (" - a failure under --strict" if ctx.strict else "; more processes would narrow it")
        )
    notes += [n for n in (ncu_note,) if n]
    notes += [f"{candidate.name}: {cand_cell.method}"]
    # The fused kernel's compiled variants this item timed, as the workers read them from the kernel (one per
    # kernel cell; an engine cell lists every variant its engine launched), and those the signed baseline it is
    # compared with dispatched: a comparison vouches for neither side unless numerics qualified both.
    dispatched = [*_cell_dispatches(cand_cell), *_cell_dispatches(base_cell), *released]
    return ItemOutcome(
        checks=[comparison.check],
        measurements=PerfNonRegressionMeasurements.written(measurements),
        tables=[comparison.table],
        parameters=p.report_parameters(),
        notes=notes,
        dispatches=sorted(set(dispatched)),
    )


def _cell_dispatches(cell: Cell | None) -> list[str]:
    if cell is None:
        return []
    one, many = cell.detail.get("specialization"), cell.detail.get("specializations")
    got = [one] if isinstance(one, str) else []
    return got + ([s for s in many if isinstance(s, str)] if isinstance(many, list) else [])
