"""Timing one step of GPU work: a CUDA graph of the step's calls, replayed once per repetition, timed with
CUDA events. Clocks are left as found (read by `gpu_info`, never set)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepTiming:
    samples_ms: list[float]  # one per repetition: the whole step
    method: str  # "cuda-graph", or "eager (why)" when capture failed


def _eager(calls: Sequence[Callable[[], object]]) -> Callable[[], None]:
    def run() -> None:
        for call in calls:
            call()

    return run


def _capture(calls: Sequence[Callable[[], object]]) -> Callable[[], None]:
    # Capture on a side stream after a run there, as torch requires for libraries that allocate lazily.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _eager(calls)()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _eager(calls)()
    return graph.replay


def time_step(
    calls: Sequence[Callable[[], object]], *, warmups: int, repetitions: int, cuda_graph: bool = True
) -> StepTiming:
    """Time `calls` run in order as one step, `repetitions` times after `warmups` untimed steps.

    The first eager run compiles/JITs everything outside the timed region. A graph removes the host's
    launch overhead, which a serving engine also removes; when capture fails the step is timed eagerly and
    the method says so, because such numbers include launch overhead.
    """
    _eager(calls)()
    torch.cuda.synchronize()
    method = "cuda-graph"
    run = _eager(calls)
    if cuda_graph:
        try:
            run = _capture(calls)
        except Exception as exc:  # reported in the result, never hidden
            torch.cuda.synchronize()
            method = f"eager ({type(exc).__name__}: {str(exc)[:120]})"
    else:
        method = "eager (cuda_graph: false)"
    for _ in range(warmups):
        run()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repetitions):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(float(start.elapsed_time(end)))
    return StepTiming(samples_ms=samples, method=method)


def copy_bandwidth_bytes_per_s(device: torch.device, nbytes: int = 2 * 1024**3, repetitions: int = 10) -> float:
    """Measured peak: a device-to-device copy of `nbytes` (read + write counted), median of repetitions."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    seconds = []
    for _ in range(repetitions):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1000.0)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(seconds)
