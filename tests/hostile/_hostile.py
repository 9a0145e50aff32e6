"""Run `qualify` (or one loader) on hostile input in a child process that cannot take the machine down.

The child gets an address-space limit, a CPU-time limit and a file-size limit, and a wall-clock timeout:
if a limit in the code under test regresses, the test fails (MemoryError traceback, timeout) instead of
swapping the machine to death or filling its disk.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

# Enough for Python + PyYAML + pydantic (~300 MiB) and for torch's import (~1 GiB of address space with
# one BLAS thread); far below what a billion-laughs expansion or a 50,000,000-layer index set needs.
CLI_MEMORY = 1 << 30
TORCH_MEMORY = 2 << 30
# A refusal must be quick: the whole child (interpreter start included) within this. Unrefused, these inputs
# take minutes or exhaust memory; refused, about a second on an idle 2-core runner, so 10 s leaves room for a
# loaded one (5 s was exceeded there once by a 50,000-node file that took 2.7 s idle).
QUICK_S = 10.0
# Files the child may write: a report or a page, never a disk-filling expansion.
MAX_WRITE = 16 << 20

_CHILD_ENV_DROP = ("QUALIFY_SIGNING_KEY", "QUALIFY_VARS")


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def _limits(memory: int, cpu_s: int, max_write: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_write, max_write))
    # Past the file-size limit a write then fails with EFBIG (an OSError) instead of killing the child.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def run_child(
    argv: Sequence[str],
    cwd: Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = QUICK_S,
    memory: int = CLI_MEMORY,
    max_write: int = MAX_WRITE,
) -> Outcome:
    """Run `python argv...` in `cwd` under the limits; fail the test if it outlives `timeout`."""
    child_env = {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROP}
    # One BLAS/OpenMP thread: their per-thread buffers would otherwise eat the address-space limit.
    child_env |= {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    child_env |= dict(env or {})
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, *argv],
            cwd=cwd,
            env=child_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=lambda: _limits(memory, int(timeout) + 1, max_write),
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"not refused within {timeout:.0f} s: {' '.join(argv)}")
    return Outcome(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def qualify(args: Sequence[str], cwd: Path, **kwargs: object) -> Outcome:
    """`qualify ARGS` in a bounded child."""
    return run_child(["-m", "qualify.cli", *args], cwd, **kwargs)  # type: ignore[arg-type]


def assert_clean_error(outcome: Outcome, code: int, first_line: str) -> str:
    """Exit `code`, no traceback anywhere, and stderr is one diagnostic line matching the regex `first_line`
    (plus, for gate files, the quoted source line the project's format adds). Returns that line."""
    assert "Traceback" not in outcome.output, outcome.output[-3000:]
    assert outcome.code == code, (outcome.code, outcome.output[-3000:])
    lines = outcome.stderr.rstrip("\n").splitlines()
    assert lines, outcome.output[-3000:]
    assert re.search(first_line, lines[0]), lines[0]
    assert all(line.startswith("    ") for line in lines[1:]) and len(lines) <= 2, lines
    return lines[0]


def snapshot(root: Path) -> dict[str, str] | None:
    """Every file under `root` with its sha256 (None when `root` does not exist): to prove nothing changed."""
    if not root.exists():
        return None
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }
