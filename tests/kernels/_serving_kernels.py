"""Shared code of the serving-path kernel tests (block-table planning, live-cache writes).

* `seeded_generator`: fresh data per test, reproducible from the test id.
* `poison_unused_slots`: NaN in every page slot that is not live, so that a kernel reading past a request's
  live tokens (or a wrong page) produces NaN instead of a plausible number.
* `run_file_in_fresh_process`: the interpreter tests of one file, run in a process where TRITON_INTERPRET=1
  comes before triton's first import (a full test session may import triton earlier).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import torch
from cartridge_attn import AttentionProblem

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FP8 = torch.float8_e4m3fn
FP8_NAN_BYTE = 0x7F  # E4M3FN: S.1111.111 is NaN


def seeded_generator(nodeid: str, salt: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(nodeid.encode()) * 7919 + salt)


def randint(gen: torch.Generator, lo: int, hi: int) -> int:
    """Uniform integer in [lo, hi]."""
    return int(torch.randint(lo, hi + 1, (), generator=gen))


def poison_unused_slots(pr: AttentionProblem) -> None:
    """NaN in every (page, slot) of the pool that holds no live token of any request (K and V)."""
    pr.poison_free_slots()


def run_file_in_fresh_process(test_file: Path, min_passed: int, *pytest_args: str) -> None:
    """Run ``test_file`` under the interpreter in a child process; fail on any failure or too few passes."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "kernels"), str(HERE), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-rs"]
    proc = subprocess.run(
        [*cmd, *pytest_args, str(test_file)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=900,
    )
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= min_passed, f"too few tests ran in the subprocess:\n{tail}"
