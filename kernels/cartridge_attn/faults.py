"""TEST-ONLY deliberately wrong variants of the fused kernel.

The numerics gate must show that it catches a broken kernel, so the kernel can be compiled as one of
these variants through the private keyword ``_fault=`` of :meth:`CartridgeAttention.plan` or
:meth:`CartridgeAttention.run`. The value reaches the kernel as a ``tl.constexpr``: with the
default ``Fault.NONE`` every faulty branch is removed at compile time, so production launches cost
nothing and compile to the same code as a kernel without the hook. Never pass a fault outside tests.

Each variant and the inputs that expose it:

``BOUNDARY_OFF_BY_ONE``
    The cartridge loop stops one position early: position ``T_c - 1``, the last before the live
    suffix, is never attended. Visible when that key carries weight (e.g. a query aligned with it).
``FP8_RAW_BITS``
    FP8 values are not converted: their bits are reinterpreted as int8 and used as numbers.
    Needs FP8 values (the default cartridge V).
``CAUSAL_SHIFT``
    The causal mask is shifted by one towards the future: query ``t`` also sees live token
    ``L - n + t + 1``. Needs a prefill with at least two query tokens (decode has no future token).
``STALE_PAGE_INDEX``
    Live token ``j`` is read through the page-table entry of page ``j // page_size - 1`` (the previous
    page's index, as if the table entry had not been refreshed). Needs more than one live page.
``FP8_SCALE_IGNORED``
    FP8 values are converted but their per-head scale is dropped. Needs a scale other than 1.
``CAUSAL_DIAGONAL``
    The causal mask is shifted by one towards the past: a query does not see its own position.
    Visible in decode and prefill.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["Fault"]


class Fault(IntEnum):
    """Test-only kernel variants; ``NONE`` is the production kernel."""

    NONE = 0
    BOUNDARY_OFF_BY_ONE = 1
    FP8_RAW_BITS = 2
    CAUSAL_SHIFT = 3
    STALE_PAGE_INDEX = 4
    FP8_SCALE_IGNORED = 5
    CAUSAL_DIAGONAL = 6
