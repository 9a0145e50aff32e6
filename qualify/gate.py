"""A compiled gate file and its items: what collection produces and a runner receives (data only)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.errors import SourceLocation
from qualify.schema.models import KindParams, Workload


@dataclass(frozen=True)
class GateFile:
    path: str
    sha256: str
    suite: str
    version: int
    description: str | None
    workloads: Mapping[str, Workload]
    base_dir: Path

    def resolve(self, relative: str) -> Path:
        """Resolve a path written in this gate file (relative paths are relative to the file)."""
        p = Path(os.path.expanduser(relative))
        return p if p.is_absolute() else (self.base_dir / p)


@dataclass(frozen=True)
class GateItem:
    """One test item: a gate with one matrix cell's values filled in."""

    name: str
    gate_id: str
    cell_id: str | None
    cell: Mapping[str, Any]
    kind: str
    params: KindParams
    requires: tuple[str, ...]
    description: str
    gate_file: GateFile
    location: SourceLocation
