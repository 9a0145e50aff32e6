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
    # Who is running now (the plugin sets it per item), and what to do when a later item reuses something an
    # earlier one built: its build time was shared work, not that item's own.
    current_owner: Any = field(default=None, repr=False)
    on_shared: Callable[[Any, float], None] = field(default=lambda owner, seconds: None, repr=False)
    _memo: dict[Any, Any] = field(default_factory=dict, repr=False)
    _built: dict[Any, tuple[float, Any]] = field(default_factory=dict, repr=False)
    _shared: set[Any] = field(default_factory=set, repr=False)
    _building: int = field(default=0, repr=False)

    def memo(self, key: Any, factory: Callable[[], T]) -> T:
        """Build an expensive object (a loaded model, a reference result, a worker's measurement) once per run.

        The build is timed. When a later item reuses it, `on_shared(builder, seconds)` is called once, so the
        item that happened to need it first can count those seconds as shared setup rather than its own; a
        build only one item uses stays that item's own time. A build inside a build counts in the outer one.
        """
        if key not in self._memo:
            start = time.perf_counter()
            outermost = not self._building
            self._building += 1
            try:
                self._memo[key] = factory()
            finally:
                self._building -= 1
            self._built[key] = (time.perf_counter() - start if outermost else 0.0, self.current_owner)
        elif key not in self._shared:
            seconds, owner = self._built.get(key, (0.0, None))
            if owner is not None and owner is not self.current_owner:
                self._shared.add(key)
                self.on_shared(owner, seconds)
        return self._memo[key]
