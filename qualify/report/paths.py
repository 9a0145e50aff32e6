"""Paths as a report states them: relative to the repository root, so a report says what was qualified
without the runner's home directory or work-folder layout, and two runners' reports compare equal."""

from __future__ import annotations

from pathlib import Path


def repository_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` (default: the working directory) holding `.git`; else `start`."""
    here = (start or Path.cwd()).resolve()
    return next((p for p in (here, *here.parents) if (p / ".git").exists()), here)


def as_reported(path: str, root: Path) -> str:
    """`path` relative to `root` (POSIX separators) when it lies inside it; otherwise unchanged."""
    p = Path(path)
    try:
        # A relative path was relative to the working directory, which need not be the root.
        return (p if p.is_absolute() else Path.cwd() / p).resolve().relative_to(root).as_posix()
    except ValueError:
        return path
