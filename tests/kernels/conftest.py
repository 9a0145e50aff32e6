"""Kernel tests: on a machine without CUDA the Triton interpreter runs the kernel on CPU tensors.

The interpreter must be chosen before ``cartridge_attn`` (and so its ``@triton.jit`` kernel) is imported,
which is why this happens at conftest import time rather than in a fixture.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# An editable install made before kernels/cartridge_attn had an __init__.py maps the package as a
# namespace; putting its source root first makes the regular package win (re-installing also fixes it).
_KERNELS = str(Path(__file__).resolve().parents[2] / "kernels")
if _KERNELS not in sys.path:
    sys.path.insert(0, _KERNELS)


def _interpreted() -> bool:
    from cartridge_attn import _kernel

    return _kernel.INTERPRETED


def interpreter_in_process() -> bool:
    """The interpreter works in this process (False when triton was imported before TRITON_INTERPRET)."""
    from cartridge_attn import api

    return api.interpreter_usable()


@pytest.fixture
def kernel_device() -> torch.device:
    """Where kernel tests put their tensors: the GPU when compiled, the CPU under the interpreter."""
    if _interpreted():
        if not interpreter_in_process():
            pytest.skip("triton was imported before TRITON_INTERPRET=1; covered by the subprocess test")
        return torch.device("cpu")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device and the Triton interpreter is off")
    return torch.device("cuda")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    if not torch.cuda.is_available():
        reason = "needs a CUDA GPU (torch.cuda.is_available() is False)"
    elif _interpreted():
        reason = "TRITON_INTERPRET=1: GPU tests need the compiled kernel"
    if reason is None:
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
