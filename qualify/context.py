"""Session-scoped state handed to every runner: host facts, options and a memo of expensive objects."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from qualify.host import HostCapabilities

T = TypeVar("T")


@dataclass
class RunContext:
    host: HostCapabilities
    seed: int = 0
    out_dir: Path | None = None
    baseline: Path | None = None
    strict: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    # Reports how far the running item is: (phase, done, total). The pytest plugin shows it live; a no-op otherwise.
    progress: Callable[[str, int, int], None] = field(default=lambda phase, done, total: None, repr=False)
    _memo: dict[Any, Any] = field(default_factory=dict, repr=False)
    _shared_s: float = field(default=0.0, repr=False)
    _building: int = field(default=0, repr=False)

    def memo(self, key: Any, factory: Callable[[], T]) -> T:
        """Build an expensive object (a loaded model, a reference result) once per run.

        The build's seconds are counted as shared work, not as the time of the item that happened to need
        it first: an item's duration is then its own, comparable across items and runs.
        """
        if key not in self._memo:
            start = time.perf_counter()
            self._building += 1
            try:
                self._memo[key] = factory()
            finally:
                self._building -= 1
                if not self._building:  # a build inside a build is already in the outer one's time
                    self._shared_s += time.perf_counter() - start
        return self._memo[key]

    @property
    def shared_seconds(self) -> float:
        """Seconds spent so far building memoized objects (nested builds counted once, by the outermost)."""
        return self._shared_s
