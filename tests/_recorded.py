"""Recorded evidence under results/, as the tests read it: reports over 256 KiB are stored packed with xz
(results/README.md), so a test asks for the file by its unpacked name and gets an unpacked copy."""

from __future__ import annotations

import lzma
import shutil
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


def recorded(relative: str, into: Path) -> Path:
    """results/`relative` itself, or its `.xz` unpacked into `into` (the same bytes the run wrote)."""
    plain = RESULTS / relative
    if plain.exists():
        return plain
    packed = plain.with_name(plain.name + ".xz")
    out = into / relative
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        with lzma.open(packed, "rb") as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return out
