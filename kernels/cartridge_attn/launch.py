"""Launching a compiled Triton kernel again without Triton's per-call binding (opt-in).

``JITFunction[grid](...)`` binds every argument, computes the specialization key and looks the compiled kernel up
on every call: ~45 us a launch with this package's 40-odd arguments on an H200 host (results/2026-12-02-hotpath-
h200), twice per layer per step in a serving engine's piecewise steps. A caller that knows which of its arguments
can change between calls keys the compiled kernel on exactly what Triton specializes those on (an integer being 1
or a multiple of 16, a pointer's element type and 16-byte alignment; the other arguments are fixed for the cache's
owner) and launches a hit through the compiled kernel's own launcher with every argument in the kernel's order. A
miss, or a JIT function that returns no compiled kernel (the interpreter), goes through the ordinary path.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch

__all__ = ["DirectLaunches", "int_specialization", "pointer_specialization"]


def int_specialization(value: int) -> tuple[bool, bool]:
    """What Triton specializes an integer argument on: equal to 1, divisible by 16."""
    return value == 1, value % 16 == 0


def pointer_specialization(tensors: Sequence[torch.Tensor]) -> tuple[tuple[torch.dtype, bool], ...]:
    """What Triton types and specializes a pointer argument on: its element type and 16-byte alignment."""
    return tuple((t.dtype, t.data_ptr() % 16 == 0) for t in tensors)


class DirectLaunches:
    """One JIT kernel's compiled variants for one owner (a layer's operands), by the caller's specialization key.

    Parameters
    ----------
    fn : JITFunction
        The ``@triton.jit`` kernel, whose ``tl.constexpr`` parameters come last.
    """

    def __init__(self, fn: Any) -> None:
        self._fn = fn
        self._arg_names = list(getattr(fn, "arg_names", []))
        self._compiled: dict[Hashable, Any] = {}
        self.direct_launches = 0  # launches that skipped Triton's binding, for tests and profiles

    def _check_order(self, args: Sequence[Any], constexprs: dict[str, Any]) -> None:
        names = self._arg_names
        if len(args) + len(constexprs) != len(names) or list(constexprs) != names[len(args) :]:
            raise ValueError(
                f"{getattr(self._fn, '__name__', self._fn)}: {len(args)} arguments then constexprs {list(constexprs)}"
                f" do not follow the kernel's parameters {names}"
            )

    def launch(
        self,
        grid: tuple[int, ...],
        key: Hashable,
        args: Sequence[Any],
        constexprs: dict[str, Any],
        options: dict[str, Any],
    ) -> Any:
        """Launch ``fn[grid](*args, **constexprs, **options)``, directly when ``key`` was launched before.

        ``key`` must hold everything that can change between this owner's calls and that Triton specializes on,
        the ``constexprs`` and ``options`` included; ``args`` are the non-constexpr arguments in the kernel's order
        and ``constexprs`` the rest in the kernel's order (checked on a compiling launch). A direct launch skips
        what else ``JITFunction.run`` does per call: pre-run hooks (none registered here), the check that globals
        the kernel reads are unchanged (these kernels read none), and the per-device lookup (an owner's tensors
        live on one device, and the launch runs on the current one).
        """
        compiled = self._compiled.get(key)
        if compiled is not None:
            # The compiled kernel's launcher takes every parameter in order (it ignores the constexprs' values) and a
            # grid of three dimensions, which the JIT path pads and it does not.
            compiled[(*grid, 1, 1)[:3]](*args, *constexprs.values())
            self.direct_launches += 1
            return compiled
        self._check_order(args, constexprs)
        compiled = self._fn[grid](*args, **constexprs, **options)
        if compiled is not None and callable(getattr(compiled, "__getitem__", None)):
            self._compiled[key] = compiled
        return compiled
