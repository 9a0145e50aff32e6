"""A live progress line for the running gate item, through pytest's terminal reporter.

On a terminal the line is rewritten in place (one line, erased when the item ends). In a CI log there is no
carriage return: a plain line at most every `LOG_INTERVAL_S`, so a long item still shows it is alive without
flooding the log. Under `-q` nothing is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

LOG_INTERVAL_S = 30.0
TTY_INTERVAL_S = 0.2


def _clock(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m}:{s:02d}"


def progress_text(item: str, phase: str, done: int, total: int, elapsed: float) -> str:
    """`item  phase done/total  elapsed m:ss  ETA m:ss` (ETA from the mean pace so far, once one unit is done)."""
    text = f"{item}  {phase} {done}/{total}  elapsed {_clock(elapsed)}"
    if 0 < done < total:
        text += f"  ETA {_clock(elapsed / done * (total - done))}"
    return text


class ItemProgress:
    """The progress callback of one item; `close()` erases the live line."""

    def __init__(
        self,
        reporter: Any,
        item: str,
        *,
        tty: bool,
        quiet: bool,
        clock: Callable[[], float] = time.monotonic,
        uncaptured: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        # `uncaptured` lifts pytest's output capture around each write: the item runs in pytest's call phase,
        # where fd 1 goes to a capture file, so a plain write would surface only after the item (or never).
        self._uncaptured = uncaptured
        self._tr = reporter
        self._item = item
        self._tty = tty
        self._quiet = quiet
        self._clock = clock
        self._start = clock()
        self._last: float | None = None
        self._shown = False

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self._quiet:
            return
        now = self._clock()
        finished = done >= total
        interval = TTY_INTERVAL_S if self._tty else LOG_INTERVAL_S
        if self._last is not None and now - self._last < interval and not (self._tty and finished):
            return
        if self._last is None and not self._tty and now - self._start < LOG_INTERVAL_S:
            return  # a short item says nothing in a log
        self._last = now
        text = progress_text(self._item, phase, done, total, now - self._start)
        with self._uncaptured():
            if self._tty:
                if not self._shown:
                    self._tr.ensure_newline()
                self._tr.rewrite(text, erase=True)
                self._shown = True
            else:
                self._tr.write_line(f"progress: {text}")
            self._tr.flush()

    def close(self) -> None:
        if self._shown:
            with self._uncaptured():
                self._tr.rewrite("", erase=True)
                self._tr.flush()
            self._shown = False
