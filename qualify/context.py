"""Session-scoped state handed to every runner: host facts, options and a memo of expensive objects."""

from __future__ import annotations

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
    _memo: dict[Any, Any] = field(default_factory=dict, repr=False)

    def memo(self, key: Any, factory: Callable[[], T]) -> T:
        """Build an expensive object (a loaded model, a reference result) once per run."""
        if key not in self._memo:
            self._memo[key] = factory()
        return self._memo[key]
