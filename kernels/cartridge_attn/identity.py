"""Kernel identity for reports: which source, which compiler, which configuration, which binary.

A report that quotes a number for "the fused kernel" must say exactly which kernel produced it: the
sha256 of the kernel source file, the Triton version, the launch configuration, the sha256 of the
compiled cubin and the compiler's resource report (registers, shared memory, spills).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import triton

from . import _kernel
from .dispatch import specialization_of

__all__ = ["compiled_identity", "kernel_identity", "source_sha256"]


# The kernel function and its source file, by implementation (KernelConfig.impl).
KERNEL_SOURCES: dict[str, tuple[str, str]] = {
    "triton": ("cartridge_attn_kernel", "_kernel.py"),
    "gluon": ("cartridge_prefill_ws_kernel", "_gluon_prefill.py"),
    "cascade": ("cartridge_cascade_kernel", "_cascade.py"),  # a decode cascade's first launch (cart_rows > 0)
}


def source_path(impl: str = "triton") -> Path:
    """The file that holds implementation ``impl``'s kernel source."""
    return Path(_kernel.__file__).with_name(KERNEL_SOURCES[impl][1])


def source_sha256(impl: str = "triton") -> str:
    """sha256 of the file that holds implementation ``impl``'s kernel source (``_kernel.py`` for Triton)."""
    return hashlib.sha256(source_path(impl).read_bytes()).hexdigest()


def compiled_identity(compiled: Any) -> dict[str, Any]:
    """Binary facts of one compiled kernel (the object a Triton launch returns).

    Parameters
    ----------
    compiled : triton.compiler.CompiledKernel or None
        None (e.g. under the interpreter) gives an entry that says so.

    Returns
    -------
    dict
        ``cubin_sha256``, ``registers``, ``spills``, ``shared_bytes``, ``name``; None where unknown.
    """
    if compiled is None or not hasattr(compiled, "asm"):
        return {
            "cubin_sha256": None,
            "registers": None,
            "spills": None,
            "shared_bytes": None,
            "name": None,
            "note": "no compiled binary (interpreter or not launched yet)",
        }
    # Handles (and n_regs / n_spills) are filled in lazily by the first launch.
    init = getattr(compiled, "_init_handles", None)
    if callable(init):
        init()
    cubin = compiled.asm.get("cubin") if hasattr(compiled.asm, "get") else None
    meta = getattr(compiled, "metadata", None)
    shared = getattr(meta, "shared", None) if meta is not None else None
    return {
        "cubin_sha256": hashlib.sha256(cubin).hexdigest() if isinstance(cubin, (bytes, bytearray)) else None,
        "registers": getattr(compiled, "n_regs", None),
        "spills": getattr(compiled, "n_spills", None),
        "shared_bytes": shared,
        "name": getattr(meta, "name", None) if meta is not None else None,
        "target": str(getattr(meta, "target", "")) if meta is not None else None,
    }


def kernel_identity(attn: Any | None = None) -> dict[str, Any]:
    """Identity of the kernel a :class:`CartridgeAttention` last launched.

    Parameters
    ----------
    attn : CartridgeAttention or None
        The wrapper; None reports only source and compiler.

    Returns
    -------
    dict
        ``source_sha256``, ``triton_version``, ``config``, ``mode``, ``specialization`` (the
        :class:`cartridge_attn.dispatch.Specialization` key) and the fields of
        :func:`compiled_identity`; for a decode cascade also ``cascade``, the same facts of its first launch.
    """
    plan = getattr(attn, "_plan", None) if attn is not None else None
    impl = plan.config.impl if plan is not None else "triton"
    kernel, source = KERNEL_SOURCES[impl]
    ident: dict[str, Any] = {
        "kernel": kernel,
        "source_file": source,
        "source_sha256": source_sha256(impl),
        "triton_version": triton.__version__,
        "interpreted": _kernel.INTERPRETED,
    }
    if attn is not None and getattr(attn, "_plan", None) is not None:
        p = attn._plan
        ident.update(
            {
                "config": p.config.as_dict(),
                "mode": p.mode,
                # The compiled variant by name, so reports can say which dispatch regions a run qualified.
                "specialization": specialization_of(p).key,
            }
        )
        ident.update(compiled_identity(attn.last_compiled))
        if p.config.cart_rows:
            kernel, source = KERNEL_SOURCES["cascade"]
            ident["cascade"] = {
                "kernel": kernel,
                "source_file": source,
                "source_sha256": source_sha256("cascade"),
                **compiled_identity(getattr(attn, "last_cascade_compiled", None)),
            }
    return ident
