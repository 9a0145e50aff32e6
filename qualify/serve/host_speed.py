"""How fast the host runs this process right now, and on which CPU.

The engine workers' batch-1 and batch-16 timings are host-bound (the profiles of 2026-12-02 show the GPU busy 12-35 %
of a prefill step), and processes of one layout on one machine were seen to run every host operation up to 2.4x
slower than others, for their whole life. A fixed pure-Python workload timed just before each timed batch, with
the CPU the thread ran on, lets a result say which processes ran on a slow host instead of blaming the layout.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

_PROBE_ITERATIONS = 20_000  # ~1-2 ms of interpreter work on a server core: short beside a timed batch


@dataclass(frozen=True)
class HostSpeed:
    probe_us: float  # median over the repeats of the fixed workload's time
    cpu: int  # the CPU the calling thread last ran on; -1 where the kernel does not say
    allowed_cpus: int  # how many CPUs the process may run on


def _workload(n: int) -> int:
    acc = 0
    items: list[tuple[int, int]] = []
    for i in range(n):
        items.append((i, i & 7))
        acc += items[-1][1]
    return acc


def cpu_of_stat(stat: str) -> int:
    """Field 39 (``processor``) of a ``/proc/.../stat`` line; the command name in field 2 may hold spaces and ')'."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[36])  # field 39 counted from 1, less the two before the name's end


def current_cpu() -> int:
    try:
        return cpu_of_stat(Path("/proc/thread-self/stat").read_text())
    except (OSError, ValueError, IndexError):
        return -1


def probe_host_speed(repeats: int = 5) -> HostSpeed:
    """Time the fixed workload ``repeats`` times (median) and note where this thread runs."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        _workload(_PROBE_ITERATIONS)
        times.append((time.perf_counter_ns() - t0) / 1e3)
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0
    return HostSpeed(probe_us=statistics.median(times), cpu=current_cpu(), allowed_cpus=allowed)
