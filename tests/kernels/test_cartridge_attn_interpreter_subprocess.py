"""Runs the interpreter tests in a fresh process when this one cannot.

Triton picks interpreter or compiler per ``@triton.jit`` at import time. In a full test session another
package (torch, transformers) may import triton before tests/kernels/conftest.py sets TRITON_INTERPRET=1;
the in-process interpreter tests then skip, and this test runs them where the variable comes first.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cartridge_attn import api

HERE = Path(__file__).resolve().parent


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA host runs the compiled-kernel tests instead")
@pytest.mark.skipif(api.interpreter_usable(), reason="the interpreter tests already run in this process")
def test_interpreter_tests_in_a_fresh_process() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1] / "kernels"), env.get("PYTHONPATH", "")])
    files = [str(HERE / "test_cartridge_attn_interpreter.py"), str(HERE / "test_cartridge_attn_api.py")]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *files],
        env=env, capture_output=True, text=True, check=False, cwd=HERE.parents[1], timeout=900,
    )  # fmt: skip
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= 25, f"too few tests ran in the subprocess:\n{tail}"
    assert "skipped" not in proc.stdout.splitlines()[-1], f"interpreter tests skipped in the subprocess:\n{tail}"
