"""qualify.serve.host_speed: the engine workers' host-speed probe and CPU placement."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from qualify.serve import host_speed


def _stat_line(comm: str, cpu: int, rng: random.Random) -> str:
    # pid (comm) state, then fields 4..52; field 39 is the CPU
    rest = [str(rng.randrange(0, 10**6)) for _ in range(49)]
    rest[39 - 4] = str(cpu)
    return f"{rng.randrange(1, 10**6)} ({comm}) R " + " ".join(rest) + "\n"


@pytest.mark.parametrize("comm", ["python3", "pt_main thread", "a) (b) R 7"])
def test_cpu_is_read_from_field_39_whatever_the_command_name(comm: str) -> None:
    rng = random.Random()
    cpu = rng.randrange(0, 512)
    assert host_speed.cpu_of_stat(_stat_line(comm, cpu, rng)) == cpu


def _cpus_this_process_may_use() -> set[int] | None:
    """Where the kernel says which CPU a thread ran on (Linux), the CPUs it may run on; else None."""
    if not Path("/proc/thread-self/stat").exists() or not hasattr(os, "sched_getaffinity"):
        return None
    return set(os.sched_getaffinity(0))


def test_probe_reports_a_median_time_and_this_threads_cpu() -> None:
    speed = host_speed.probe_host_speed(repeats=3)
    assert speed.probe_us > 0
    allowed = _cpus_this_process_may_use()
    if allowed is None:
        assert speed.cpu == -1
    else:
        assert speed.cpu in allowed and speed.allowed_cpus == len(allowed)


def test_probe_time_grows_with_the_work(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fake clock that advances with the workload's iterations: the probe reports that work's time, not a constant.
    now = [0]

    def fake_workload(n: int) -> int:
        now[0] += n * 100  # 100 ns per iteration
        return n

    monkeypatch.setattr(host_speed, "_workload", fake_workload)
    monkeypatch.setattr(host_speed.time, "perf_counter_ns", lambda: now[0])
    base = host_speed.probe_host_speed(repeats=3).probe_us
    monkeypatch.setattr(host_speed, "_PROBE_ITERATIONS", host_speed._PROBE_ITERATIONS * 3)
    assert host_speed.probe_host_speed(repeats=3).probe_us == pytest.approx(3 * base)


def test_current_cpu_is_read_in_a_thread_too() -> None:
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(host_speed.current_cpu()))
    t.start()
    t.join()
    allowed = _cpus_this_process_may_use()
    assert seen == [-1] if allowed is None else seen[0] in allowed
