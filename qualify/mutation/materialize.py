"""A copy of the target package with at most one mutant applied, importable ahead of the installed one."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from qualify.errors import GateFileError
from qualify.mutation.catalog import Mutant


@dataclass(frozen=True)
class Copy:
    """`import_root` goes first on the child's PYTHONPATH; `package` is the copied package folder."""

    import_root: Path
    package: Path
    tree_sha256: str  # every .py file of the copy, names and contents
    edited_sha256: str | None  # the edited file after the edit; None for the unmutated copy


def tree_sha256(package: Path) -> str:
    """One digest of a package's Python sources (relative names and contents, in sorted order)."""
    h = hashlib.sha256()
    for f in sorted(package.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        h.update(f.relative_to(package).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _indentations(text: str, first_line: str) -> list[str]:
    """Leading whitespace of every source line whose content is `first_line` (for multi-line edits)."""
    out = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if stripped == first_line:
            out.append(line[: len(line) - len(stripped)])
    return sorted(set(out))


def _reindent(block: str, indent: str) -> str:
    return "\n".join((indent + ln) if ln else ln for ln in block.split("\n"))


def apply_edit(source: str, m: Mutant) -> str:
    """`source` with `m`'s edit; GateFileError naming the mutant when its text is missing or ambiguous.

    A one-line edit is matched as written. An edit with several lines (in `find` or `replace`) is written without
    its indentation (YAML block scalars strip it) and matched at the indentation of any source line equal to the
    first line of `find`; `replace` is indented the same way.
    """
    if "\n" in m.find or "\n" in m.replace:
        candidates = [
            (_reindent(m.find, ind), _reindent(m.replace, ind))
            for ind in _indentations(source, m.find.split("\n", 1)[0])
        ]
    else:
        candidates = [(m.find, m.replace)]
    spans = [(pos, find, repl) for find, repl in candidates for pos in _positions(source, find)]
    spans.sort()
    if not spans:
        raise GateFileError(f"mutant {m.id}: its text no longer occurs in {m.file}: {m.find.splitlines()[0]!r}")
    if m.occurrence is None and len(spans) > 1:
        raise GateFileError(f"mutant {m.id}: its text occurs {len(spans)} times in {m.file}; set `occurrence`")
    index = (m.occurrence or 1) - 1
    if index >= len(spans):
        raise GateFileError(f"mutant {m.id}: occurrence {m.occurrence} asked, {m.file} has {len(spans)}")
    pos, find, repl = spans[index]
    return source[:pos] + repl + source[pos + len(find) :]


def _positions(text: str, needle: str) -> list[int]:
    out, start = [], 0
    while (i := text.find(needle, start)) != -1:
        out.append(i)
        start = i + 1
    return out


def materialize(target: Path, dest: Path, mutant: Mutant | None) -> Copy:
    """Copy package `target` to `dest/<name>` (which must not exist) and apply `mutant` to the copy."""
    package = dest / target.name
    shutil.copytree(target, package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    edited = None
    if mutant is not None:
        path = package / mutant.file
        mutated = apply_edit(path.read_text(encoding="utf-8"), mutant)
        path.write_text(mutated, encoding="utf-8")
        edited = hashlib.sha256(mutated.encode("utf-8")).hexdigest()
    return Copy(import_root=dest, package=package, tree_sha256=tree_sha256(package), edited_sha256=edited)
