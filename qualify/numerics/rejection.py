"""A rejection as a check: the documented error was raised (and names the broken field), nothing was served."""

from __future__ import annotations

from collections.abc import Callable

from qualify.results import Check

LAYOUT_ERROR = "UnsupportedLayoutError"
ARCH_ERROR = "UnsupportedArchitectureError"


def expect_rejection(call: Callable[[], object]) -> BaseException | None:
    """Run `call`; the exception it raised, or None when it completed (the input was served)."""
    try:
        call()
    except Exception as exc:  # any error is recorded; only the documented one passes
        return exc
    return None


def rejection_check(
    name: str,
    raised: BaseException | None,
    *,
    expected: str = LAYOUT_ERROR,
    field: str | None = None,
    served: str = "the layout was SERVED",
) -> Check:
    """1 when `raised` is the `expected` error type (by name) and its message names `field`, else 0.

    The type is matched by name so that the check does not import the kernel package; `field` makes a
    rejection for some other reason fail the check.
    """
    ok = type(raised).__name__ == expected and (field is None or field in str(raised))
    naming = "" if field is None else f" naming {field!r}"
    got = f"no error: {served}" if raised is None else f"{type(raised).__name__}: {raised}"
    return Check(
        name=name,
        observed=1.0 if ok else 0.0,
        operator=">=",
        threshold=1.0,
        statistic=f"1 when {expected}{naming} is raised; got {got}",
        n=1,
    )
