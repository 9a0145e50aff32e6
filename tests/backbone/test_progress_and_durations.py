"""Live progress (rewritten on a terminal, rate-limited plain lines in a log, silent under -q) and per-item
durations that exclude shared, memoized work."""

from __future__ import annotations

import pytest

import qualify.context as context_module
from qualify.context import RunContext
from qualify.host import HostCapabilities
from qualify.progress import LOG_INTERVAL_S, ItemProgress, progress_text


class FakeReporter:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def ensure_newline(self) -> None:
        self.calls.append(("newline", ""))

    def rewrite(self, line: str, erase: bool = False) -> None:
        self.calls.append(("rewrite", line))

    def write_line(self, line: str) -> None:
        self.calls.append(("line", line))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_text_has_counts_elapsed_and_eta() -> None:
    assert progress_text("loss[run1]", "sequences", 16, 64, 30.0) == (
        "loss[run1]  sequences 16/64  elapsed 0:30  ETA 1:30"
    )
    assert progress_text("x", "p", 0, 4, 5.0) == "x  p 0/4  elapsed 0:05"  # no pace yet, no ETA
    assert progress_text("x", "p", 4, 4, 65.0) == "x  p 4/4  elapsed 1:05"


def run_item(*, tty: bool, quiet: bool = False, total: int) -> FakeReporter:
    """An item reporting `done` = 0 .. total, one second apart, then closed."""
    tr, clock = FakeReporter(), Clock()
    p = ItemProgress(tr, "item", tty=tty, quiet=quiet, clock=clock)
    for done in range(total + 1):
        clock.now += 1.0
        p("sequences", done, total)
    p.close()
    return tr


def test_on_a_terminal_one_line_is_rewritten_and_erased_at_the_end() -> None:
    tr = run_item(tty=True, total=4)
    kinds = [k for k, _ in tr.calls]
    assert kinds[0] == "newline" and kinds.count("newline") == 1 and "line" not in kinds
    assert tr.calls[-1] == ("rewrite", "")  # erased
    assert ("rewrite", "item  sequences 2/4  elapsed 0:03  ETA 0:03") in tr.calls


def test_in_a_log_lines_are_plain_and_rate_limited() -> None:
    tr = run_item(tty=False, total=199)
    assert all(kind == "line" and text.startswith("progress: item  sequences ") for kind, text in tr.calls)
    assert len(tr.calls) == int(200 // LOG_INTERVAL_S)  # one every 30 s, none in the first 30 s
    assert not any("\r" in text for _, text in tr.calls)


@pytest.mark.parametrize("tty", [True, False])
def test_quiet_writes_nothing(tty: bool) -> None:
    assert run_item(tty=tty, quiet=True, total=100).calls == []


def test_memoized_builds_are_shared_time_counted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter(range(0, 1000, 5))
    monkeypatch.setattr(context_module.time, "perf_counter", lambda: float(next(ticks)))
    ctx = RunContext(host=HostCapabilities(available=frozenset()))
    assert ctx.memo("outer", lambda: ctx.memo("inner", lambda: 1) + 1) == 2
    # The outer build reads the clock at 0 and at its end (10); the inner one, inside it, starts at 5 and adds
    # nothing of its own. Counting both would give 10 + (the inner one's 5..end) instead.
    assert ctx.shared_seconds == 10.0
    assert ctx.memo("outer", lambda: 99) == 2  # memoized: not rebuilt, no more shared time
    assert ctx.shared_seconds == 10.0
    assert ctx.memo("second", lambda: 3) == 3  # a later, separate build adds its own span (15..20)
    assert ctx.shared_seconds == 15.0
