"""Perf and engine samples of a report as pytest-benchmark JSON, for `pytest-benchmark compare` and its ingesters.

pytest-benchmark's unit is seconds per round, lower is better. Each measured side of a perf item (the candidate,
and the baseline when this run measured it) becomes one benchmark whose rounds are its repetitions over every
fresh process: tokens/s become seconds per step (batch / tok/s: one step makes one token per request), ms become
s. What was measured, in its own unit, stays in `extra_info` (the per-process samples, the unit, the items that
used it). A baseline read from a signed release report is not re-exported: it was measured by that run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from qualify.errors import QualifyError
from qualify.kinds.perf_nonregression.measurements import PerfNonRegressionMeasurements
from qualify.render.blocks import read_measurements

KIND = "perf_nonregression"


def _to_seconds(unit: str, batch: int) -> Callable[[float], float] | None:
    if unit == "ms":
        return lambda v: v / 1e3
    if unit == "us":
        return lambda v: v / 1e6
    if unit == "s":
        return lambda v: v
    if unit == "tok/s":
        return lambda v: batch / v
    return None


def _machine_info(provenance: dict[str, Any]) -> dict[str, Any]:
    cuda = provenance.get("cuda") or {}
    gpus = [d.get("name") for d in cuda.get("devices") or [] if isinstance(d, dict)]
    return {
        "node": provenance.get("hostname", ""),
        "processor": (provenance.get("cpu") or {}).get("model", ""),
        "machine": provenance.get("os", ""),  # the measuring host's, not the exporting one's
        "python_implementation": "CPython",
        "python_version": provenance.get("python", ""),
        "system": provenance.get("os", ""),
        "release": provenance.get("os", ""),
        "cpu": provenance.get("cpu") or {},
        "gpu": gpus,
        "versions": provenance.get("versions") or {},
    }


def _commit_info(provenance: dict[str, Any]) -> dict[str, Any]:
    git = provenance.get("git") or {}
    return {
        "id": git.get("commit", "unknown"),
        "dirty": git.get("dirty") is True,
        "project": "cartridge-qualify",
        "branch": git.get("branch", ""),
        "time": provenance.get("started_at", ""),
    }


def benchmark_document(report: dict[str, Any]) -> dict[str, Any]:
    """The pytest-benchmark JSON document of `report`'s perf items; QualifyError if it has none with samples."""
    from pytest_benchmark import __version__ as pb_version
    from pytest_benchmark.stats import Stats

    benches: dict[str, dict[str, Any]] = {}
    for item in report.get("items") or []:
        if not isinstance(item, dict) or item.get("kind") != KIND:
            continue
        m = read_measurements(PerfNonRegressionMeasurements, item)
        if m is None:
            continue
        convert = _to_seconds(m.unit, m.batch)
        if convert is None:
            raise QualifyError(f"item {item.get('name')}: unit {m.unit!r} has no seconds-per-round form")
        sides = [("candidate", m.candidate, m.candidate_process_samples)]
        if m.baseline_source.startswith("measured in this run"):
            sides.append(("baseline", m.baseline, m.baseline_process_samples))
        for role, implementation, processes in sides:
            name = f"{m.metric}[{implementation}-b{m.batch}-s{m.suffix}]"
            raw = [x for group in processes for x in group]
            if not raw or not all(math.isfinite(x) and x > 0 for x in raw):
                raise QualifyError(f"item {item.get('name')}: {role} samples must be finite and positive")
            data = [convert(x) for x in raw]
            if name in benches and benches[name]["stats"]["data"] != data:
                name = f"{name}#{item.get('name')}"  # same cell measured twice (other options): keep both
            if name in benches:
                benches[name]["extra_info"]["items"].append(item.get("name"))
                continue
            stats = Stats()
            for x in data:
                stats.update(x)
            benches[name] = {
                "group": f"{m.metric} b{m.batch} s{m.suffix}",
                "name": name,
                "fullname": f"{item.get('gate_file', '')}::{name}",
                "params": {"implementation": implementation, "batch": m.batch, "suffix": m.suffix},
                "param": f"{implementation}-b{m.batch}-s{m.suffix}",
                "extra_info": {
                    "unit": "s per round",
                    "round": "one decode step (batch tokens)" if m.unit == "tok/s" else f"one {m.metric} sample",
                    "measured_unit": m.unit,
                    "process_samples": [list(g) for g in processes],
                    "role": role,
                    "items": [item.get("name")],
                },
                "options": {"timer": getattr(m.timing_method, role) or "unknown", "processes": len(processes)},
                "stats": {**stats.as_dict(), "data": data, "iterations": 1},
            }
    if not benches:
        raise QualifyError("the report has no perf_nonregression item with samples to export")
    provenance = report.get("provenance") or {}
    return {
        "machine_info": _machine_info(provenance),
        "commit_info": _commit_info(provenance),
        "benchmarks": list(benches.values()),
        "datetime": provenance.get("finished_at", ""),
        "version": pb_version,
    }
