"""One gate run in a fresh process over one copy of the kernel package, and what it says about the mutant.

The child is `qualify run GATE... -- -x`: it imports the copy (first on PYTHONPATH) and stops at the first item
that fails, which is all a kill needs. Before the run a probe checks that the child really imports the copy, and
afterwards every kernel identity in the child's report must name the copy's kernel source: a mutant that never
loaded must not be counted as killed or survived.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from qualify.hashing import sha256_file
from qualify.mutation.materialize import Copy

_PROBE = "import cartridge_attn, pathlib; print(pathlib.Path(cartridge_attn.__file__).resolve().parent)"
_TAIL_CHARS = 2000
# What one name of a pytest -k expression may hold (pytest's own identifier grammar); -k matches substrings, so an
# expression of names selects every item so named and perhaps more, never fewer.
_K_NAME = re.compile(r"(?:\w|:|\+|-|\.|\[|\]|\\|/)+")
# An item that ran out of GPU memory shows nothing about the mutant: the allocation fails for the host's reasons
# (2026-12-07: the Gluon mutants, eight at once beside the numerics gate, on an 80 GB card), so it is no kill.
_OUT_OF_MEMORY = re.compile(r"out[ _]of[ _]memory|OutOfMemoryError|_ALLOC_FAILED", re.IGNORECASE)


class MutantStatus(StrEnum):
    KILLED = "killed"  # an item failed, or errored but not out of GPU memory (a crash detects too; named apart)
    SURVIVED = "survived"  # every item ran and passed
    EQUIVALENT = "equivalent"  # survived, and the catalog argues why no input can tell it apart
    INCONCLUSIVE = "inconclusive"  # nothing failed, but items were skipped, incomplete or out of GPU memory
    BROKEN = "broken"  # no usable report: the copy was not imported, the child crashed or timed out


@dataclass(frozen=True)
class ChildRun:
    """What one child run showed."""

    status: MutantStatus
    verdict: str | None
    exit_code: int | None
    wall_s: float
    killed_by: list[dict[str, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    report_sha256: str | None = None
    reason: str = ""
    out_of_memory: list[str] = field(default_factory=list)  # node ids of the items that ran out of GPU memory

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "wall_s": round(self.wall_s, 2),
            "killed_by": self.killed_by,
            "counts": self.counts,
            "report_sha256": self.report_sha256,
            "reason": self.reason,
            "out_of_memory": self.out_of_memory,
        }


def child_env(copy: Copy, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(copy.import_root), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _tail(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return (text or "")[-_TAIL_CHARS:]


def probe_import(copy: Copy, env: dict[str, str], cwd: Path) -> str:
    """'' when the child imports `cartridge_attn` from the copy, else why not."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        return "the import probe timed out"
    where = proc.stdout.strip()
    if proc.returncode != 0:
        return f"the import probe failed: {_tail(proc.stderr)}"
    if Path(where) != copy.package.resolve():
        return f"the child imports cartridge_attn from {where}, not from the mutant copy {copy.package}"
    return ""


def _kernel_sources(report: dict[str, Any]) -> set[str]:
    found = set()
    for item in report.get("items") or []:
        kernel = (item.get("measurements") or {}).get("kernel")
        if isinstance(kernel, dict) and isinstance(kernel.get("source_sha256"), str):
            found.add(kernel["source_sha256"])
    return found


@dataclass(frozen=True, order=True)
class GateItemRef:
    """One item of a child's report: its node id (file and name: two gate files may hold items of one name) and
    its name, which a -k expression can select it by."""

    nodeid: str
    name: str


def items_expression(names: Sequence[str]) -> str | None:
    """A pytest -k expression selecting (at least) the items of these names; None when a name cannot be written in
    one (then the whole gate has to run)."""
    if not names or any(not _K_NAME.fullmatch(n) or n in ("and", "or", "not") for n in names):
        return None
    return " or ".join(sorted(set(names)))


def _nodeid(item: dict[str, Any]) -> str:
    return str(item.get("nodeid") or item.get("name"))


def _out_of_memory(item: dict[str, Any]) -> bool:
    return item.get("status") == "error" and bool(_OUT_OF_MEMORY.search(str(item.get("reason") or "")))


def classify(report: dict[str, Any], copy: Copy, required: Collection[str] | None = None) -> ChildRun:
    """The mutant's status from the child's plain report (before timing and exit code are filled in). With
    `required` (node ids, for a run of selected items): SURVIVED means every required item ran and passed, and
    nothing else failed (an item out of GPU memory, required or not, leaves it INCONCLUSIVE)."""
    items = report.get("items") or []
    counts: dict[str, int] = {}
    for it in items:
        counts[str(it.get("status"))] = counts.get(str(it.get("status")), 0) + 1
    # Every kernel the report names must be a source file of the copy (the Triton kernel, the Gluon prefill).
    expected = {sha256_file(p) for p in copy.package.glob("*.py")}
    foreign = _kernel_sources(report) - expected
    verdict = report.get("verdict")
    if foreign:
        return ChildRun(MutantStatus.BROKEN, verdict, None, 0.0, counts=counts,
                        reason=f"the report names kernel sources other than the copy's: {sorted(foreign)}")  # fmt: skip
    starved = [_nodeid(it) for it in items if _out_of_memory(it)]
    killers = [
        {"item": str(it.get("name") or it.get("nodeid")), "nodeid": _nodeid(it), "status": str(it.get("status")),
         "failed_checks": "; ".join(c.get("name", "") for c in it.get("checks") or [] if not c.get("passed"))[:300],
         "reason": str(it.get("reason") or "")[:300]}
        for it in items
        if it.get("status") in ("failed", "error") and not _out_of_memory(it)
    ]  # fmt: skip
    if killers:
        return ChildRun(MutantStatus.KILLED, verdict, None, 0.0, killed_by=killers, counts=counts,
                        out_of_memory=starved)  # fmt: skip
    if starved:
        reason = f"{len(starved)} items ran out of GPU memory (the host's, not a kill): {', '.join(starved)[:300]}"
        return ChildRun(MutantStatus.INCONCLUSIVE, verdict, None, 0.0, counts=counts, reason=reason,
                        out_of_memory=starved)  # fmt: skip
    if required is not None:
        passed = {_nodeid(it) for it in items if it.get("status") == "passed"}
        missing = sorted(set(required) - passed)
        if missing:
            reason = f"{len(missing)} required items did not run and pass: {', '.join(missing)[:300]}"
            return ChildRun(MutantStatus.INCONCLUSIVE, verdict, None, 0.0, counts=counts, reason=reason)
        return ChildRun(MutantStatus.SURVIVED, verdict, None, 0.0, counts=counts)
    if verdict == "PASS" and counts.get("passed", 0) > 0:
        return ChildRun(MutantStatus.SURVIVED, verdict, None, 0.0, counts=counts)
    return ChildRun(MutantStatus.INCONCLUSIVE, verdict, None, 0.0, counts=counts,
                    reason=f"verdict {verdict} with nothing failed: {counts}")  # fmt: skip


def run_child(
    copy: Copy,
    gate_files: list[Path],
    out_dir: Path,
    name: str,
    *,
    cwd: Path,
    seed: int,
    timeout_s: float,
    stop_at_first_failure: bool = True,
    only_items: Sequence[GateItemRef] | None = None,
) -> ChildRun:
    """Run the gate files against `copy` in a fresh process; the child's plain report goes to `out_dir/name.json`.
    `only_items`: run just these items (selected by name: an expression of their names must exist,
    `items_expression`), and classify by them alone, by node id."""
    select = None
    if only_items is not None:
        select = items_expression([i.name for i in only_items])
        if select is None:
            raise ValueError(f"no -k expression selects the items {[i.name for i in only_items]}")
    env = child_env(copy)
    started = time.perf_counter()
    problem = probe_import(copy, env, cwd)
    if problem:
        return ChildRun(MutantStatus.BROKEN, None, None, time.perf_counter() - started, reason=problem)
    argv = [sys.executable, "-m", "qualify.cli", "run", *map(str, gate_files), "--out", str(out_dir),
            "--name", name, "--seed", str(seed), "--non-release"]  # fmt: skip
    if select is not None:
        argv += ["-k", select]
    if stop_at_first_failure:
        argv += ["--", "-x"]
    try:
        proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        return ChildRun(MutantStatus.BROKEN, None, None, time.perf_counter() - started,
                        reason=f"timed out after {timeout_s:.0f} s: {_tail(exc.stderr)}")  # fmt: skip
    wall = time.perf_counter() - started
    report_path = out_dir / f"{name}.json"
    if not report_path.is_file():
        return ChildRun(MutantStatus.BROKEN, None, proc.returncode, wall,
                        reason=f"no report written (exit {proc.returncode}): {_tail(proc.stderr)}")  # fmt: skip
    report = json.loads(report_path.read_text(encoding="utf-8"))
    got = classify(report, copy, None if only_items is None else [i.nodeid for i in only_items])
    return ChildRun(
        got.status, got.verdict, proc.returncode, wall, got.killed_by, got.counts, sha256_file(report_path),
        got.reason, got.out_of_memory,
    )  # fmt: skip
