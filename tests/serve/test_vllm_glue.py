"""qualify.serve's glue against vLLM 0.26's own classes (compiled on CUDA, interpreted on CPU); skipped without vLLM.

The check runs as a script in a fresh process, because the Triton interpreter must be switched on before
triton's first import (see vllm_glue_check.py for what it checks).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM 0.26 (the serve extra)")
def test_backend_and_connector_glue_against_vllm_classes(test_seed: int) -> None:
    import torch

    # On a GPU host the check runs the compiled kernel (what ships); elsewhere the Triton interpreter.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "kernels"), env.get("PYTHONPATH", "")])
    seed = str(test_seed)
    proc = subprocess.run(
        [sys.executable, str(HERE / "vllm_glue_check.py"), seed, device],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("OK"), (
        f"seed {seed}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
