"""The Python garbage collector's pauses while a block runs.

A timed batch in an in-process engine (the engine core runs in the caller's process) stalls for every collection
the interpreter makes meanwhile, the engine's own allocations and the harness's alike. A full collection over a
large heap can take milliseconds; its timing follows the allocation pattern, so it can fall into the same phase of
every repetition in one process and into another in the next, which reads as a difference between processes.
Recording the pauses per timed batch lets a result show whether its spread is the collector's.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GcPauses:
    """What the collector did while the block ran: collections per generation and the time they took."""

    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    pause_s: float = 0.0


@contextlib.contextmanager
def gc_pauses() -> Iterator[GcPauses]:
    """Count and time every collection made while the block runs (any thread; gc.callbacks sees them all)."""
    seen = GcPauses()
    started: list[float] = []

    def on_collect(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            seen.pause_s += time.perf_counter() - started.pop()
            seen.collections[min(int(info.get("generation", 2)), 2)] += 1

    gc.callbacks.append(on_collect)
    try:
        yield seen
    finally:
        gc.callbacks.remove(on_collect)
