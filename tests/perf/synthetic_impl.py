"""A CPU-only implementation set for the perf runner's tests: timings drawn from known distributions.

Imported by the worker subprocess (tests put this folder on PYTHONPATH). Each implementation's centre is
fixed; every process lands a little off it (`PROCESS_DRIFT`, as clocks and placement move a real process), and
its repetitions scatter around that (`NOISE`); `redundant_launches` multiplies the step time, as the real
option does. Every worker start is appended to $SYNTHETIC_PERF_LOG (implementation, options, process) so tests
can count and order processes.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from qualify.perf.metrics import metric
from qualify.perf.spec import Cell, WorkRequest, WorkResult

STEP_MS = {"fast": 1.0, "slow": 1.5, "same-a": 1.2, "same-b": 1.2}
NOISE = {"fast": 0.01, "slow": 0.01, "same-a": 0.08, "same-b": 0.08}
PROCESS_DRIFT = {"fast": 0.005, "slow": 0.005, "same-a": 0.01, "same-b": 0.01}


def measure(request: WorkRequest) -> WorkResult:
    return _measure(request, factor=1.0)


def measure_regressed(request: WorkRequest) -> WorkResult:
    """The same implementations, every step 1.5x slower: a later build that regressed."""
    return _measure(request, factor=1.5)


def _measure(request: WorkRequest, factor: float) -> WorkResult:
    log = os.environ.get("SYNTHETIC_PERF_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(f"{request.implementation} {request.options} p{request.process}\n")
    shape, timing = request.shape_set(), request.timing_config()
    slow = request.implementation_options().redundant_launches
    # Deterministic per (implementation, options, process) and cell: two runs of the same thing draw the same
    # timings, the processes of one run differ, and a cell's draws do not depend on which others were asked for.
    process_factor = 1 + PROCESS_DRIFT[request.implementation] * _rng(request).standard_normal()
    cells = []
    for suffix in shape.suffixes:
        for batch in shape.batches:
            for name in request.metrics:
                m = metric(name)
                rng = _rng(request, name, batch, suffix)
                centre = STEP_MS[request.implementation] * factor * slow * (1 + batch / 64) * process_factor
                ms = centre * (1 + NOISE[request.implementation] * rng.standard_normal(timing.repetitions))
                ms = [float(abs(x)) for x in ms]
                samples = [batch / (t / 1000) for t in ms] if m.phase == "decode" else ms
                cells.append(
                    Cell(
                        metric=m.name,
                        batch=batch,
                        suffix=suffix,
                        live=suffix,
                        samples=samples,
                        step_ms=ms,
                        bytes_moved=1000 * batch,
                        pct_peak_bw=50.0,
                        method="synthetic",
                        # As the fused kernel's cells do: each names the kernel it launched, which depends on the
                        # batch; the worker's own identity below is its first cell's, as kernel_set's is.
                        detail={"identity": {"config": {"batch": batch}}},
                    )
                )
    return WorkResult(
        implementation_set=request.implementation_set,
        implementation=request.implementation,
        options=request.options,
        cells=cells,
        clocks={"before": {"gpus": []}, "after": {"gpus": []}},
        identity=cells[0].detail["identity"] if cells else None,
    )


def _rng(request: WorkRequest, *cell: object) -> np.random.Generator:
    key = ":".join(map(str, (request.implementation, request.options, request.process, *cell)))
    return np.random.default_rng(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"))


def broken(request: WorkRequest) -> WorkResult:
    log = os.environ.get("SYNTHETIC_PERF_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(f"broken {request.implementation}\n")
    raise RuntimeError("synthetic worker failure: CUDA out of memory (pretend)")
