"""Environment variables set for one block: how this process tells the vLLM engines it starts what to do (their
engine cores read the variables, in this process or a child that inherits them)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def scoped_env(name: str, value: str | None) -> Iterator[None]:
    """`name` set to `value` while the block runs (left as it is for None), then restored to what it was."""
    before = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
