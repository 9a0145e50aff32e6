"""Kernel tests run in one of two execution modes, chosen per process:

* ``interpreter``: the Triton interpreter runs the kernel on CPU tensors (hosts without CUDA; every dot on
  fp32 operands, since the interpreter's bf16 dot is wrong);
* ``compiled``: the compiled kernel on a CUDA GPU (SM90), bf16 dots on the matrix units.

``QUALIFY_KERNEL_MODE`` (``auto``, the default: compiled where CUDA is present, else the interpreter; or
``interpreter`` / ``compiled``) picks it. The interpreter must be chosen before ``cartridge_attn`` (and so its
``@triton.jit`` kernel) is imported, which is why this happens at conftest import time rather than in a
fixture. Tests that take the ``kernel_device`` fixture are parametrized with the mode (``[interpreter-...]`` or
``[compiled-...]`` in their ids) and marked ``kernel``, so ``pytest -m kernel`` on a GPU host runs the same
tests on the compiled kernel (``nox -s gpu`` does).
"""

from __future__ import annotations

import os

import pytest
import torch

MODE_ENV = "QUALIFY_KERNEL_MODE"
_requested = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
if _requested not in ("auto", "interpreter", "compiled"):
    raise pytest.UsageError(f"{MODE_ENV}={_requested!r}: expected auto, interpreter or compiled")
if _requested == "interpreter" or (_requested == "auto" and not torch.cuda.is_available()):
    os.environ.setdefault("TRITON_INTERPRET", "1")
elif _requested == "compiled" and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    raise pytest.UsageError(f"{MODE_ENV}=compiled contradicts TRITON_INTERPRET={os.environ['TRITON_INTERPRET']}")


def _interpreted() -> bool:
    from cartridge_attn import _kernel

    return _kernel.INTERPRETED


def interpreter_in_process() -> bool:
    """The interpreter works in this process (False when triton was imported before TRITON_INTERPRET)."""
    from cartridge_attn import api

    return api.interpreter_usable()


def kernel_mode_of_this_process() -> str:
    """``interpreter`` or ``compiled``: what a kernel launch in this process runs on."""
    return "interpreter" if _interpreted() else "compiled"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kernel: launches a Triton kernel in this process's execution mode (interpreter on CPU, compiled on CUDA)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # One mode per process (Triton fixes it at import), so one parameter; the id names the mode in reports.
    if "kernel_device" in metafunc.fixturenames:
        metafunc.parametrize("kernel_mode", [kernel_mode_of_this_process()])


@pytest.fixture
def kernel_device(kernel_mode: str) -> torch.device:
    """Where kernel tests put their tensors: the CPU under the interpreter, the GPU when compiled."""
    if kernel_mode == "interpreter":
        if not interpreter_in_process():
            pytest.skip("triton was imported before TRITON_INTERPRET=1; covered by the subprocess test")
        return torch.device("cpu")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device and the Triton interpreter is off")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"the compiled kernel is qualified on SM90 only; this GPU is {torch.cuda.get_device_capability()}")
    return torch.device("cuda")


@pytest.hookimpl(tryfirst=True)  # mark before `-m kernel` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    if not torch.cuda.is_available():
        reason = "needs a CUDA GPU (torch.cuda.is_available() is False)"
    elif _interpreted():
        reason = "TRITON_INTERPRET=1: GPU tests need the compiled kernel"
    for item in items:
        if "kernel_device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kernel)
        if reason is not None and "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
