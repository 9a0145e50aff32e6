"""The signed report the rendering tests share (built once per session by the `signed` fixture)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Signed:
    envelope: Path
    report_path: Path
    report: dict[str, Any]
    public_key: Path
    other_public_key: Path
