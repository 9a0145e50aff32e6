"""Errors raised when a call falls outside what the fused kernel is specialized for.

Every rejection names what was expected and what was given, so that a caller can fix the call
without reading the kernel. This package deliberately does not depend on ``qualify``: the kernel
must be importable by a serving stack that has never heard of the qualification suite.
"""

from __future__ import annotations

__all__ = [
    "CartridgeAttentionError",
    "NotPlannedError",
    "UnsupportedArchitectureError",
    "UnsupportedLayoutError",
]


class CartridgeAttentionError(ValueError):
    """Base of every error this package raises on purpose."""


class UnsupportedLayoutError(CartridgeAttentionError):
    """A shape, dtype, layout or length that the specialization does not cover.

    Parameters
    ----------
    what : str
        The argument or property that is out of range, e.g. ``"cartridge_len"``.
    expected : str
        What the kernel accepts, in words.
    actual : object
        What was given; rendered with ``repr`` for strings and ``str`` otherwise.
    """

    def __init__(self, what: str, expected: str, actual: object):
        self.what = what
        self.expected = expected
        self.actual = actual
        shown = repr(actual) if isinstance(actual, str) else str(actual)
        super().__init__(f"{what}: expected {expected}, got {shown}")


class UnsupportedArchitectureError(CartridgeAttentionError):
    """The GPU is outside the qualified envelope (SM90) and no opt-in was given."""


class NotPlannedError(CartridgeAttentionError):
    """``run`` was called before ``plan``."""
