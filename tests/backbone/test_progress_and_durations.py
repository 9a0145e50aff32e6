"""Live progress (rewritten on a terminal, rate-limited plain lines in a log, silent under -q) and per-item
durations that exclude shared, memoized work."""

from __future__ import annotations

import pytest

import qualify.context as context_module
from qualify.context import RunContext
from qualify.host import HostCapabilities
from qualify.plugin import _move_to_shared
from qualify.progress import LOG_INTERVAL_S, ItemProgress, progress_text
from qualify.results import ItemResult, Status


class FakeReporter:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def ensure_newline(self) -> None:
        self.calls.append(("newline", ""))

    def rewrite(self, line: str, erase: bool = False) -> None:
        self.calls.append(("rewrite", line))

    def write_line(self, line: str) -> None:
        self.calls.append(("line", line))

    def flush(self) -> None:
        pass


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


def test_a_build_is_shared_time_only_once_a_later_item_reuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter(range(0, 1000, 5))
    monkeypatch.setattr(context_module.time, "perf_counter", lambda: float(next(ticks)))
    moved: list[tuple[str, float]] = []
    ctx = RunContext(host=HostCapabilities(available=frozenset()), on_shared=lambda o, s: moved.append((o, s)))
    ctx.current_owner = "first"
    # The outer build reads the clock at 0 and at its end (10); the inner one, inside it, counts in the outer.
    assert ctx.memo("model", lambda: ctx.memo("tokenizer", lambda: 1) + 1) == 2
    assert ctx.memo("only-mine", lambda: 3) == 3  # 15..20
    assert ctx.memo("model", lambda: 99) == 2  # the same item again: still its own time
    assert moved == []
    ctx.current_owner = "second"
    assert ctx.memo("model", lambda: 99) == 2  # a later item reuses it: the builder's 10 s were shared
    assert ctx.memo("model", lambda: 99) == 2  # reported once
    assert moved == [("first", 10.0)]
    ctx.current_owner = "third"
    ctx.memo("tokenizer", lambda: 99)  # built inside "model": its time is already in the outer build's
    assert moved == [("first", 10.0), ("first", 0.0)]


def test_the_line_reaches_the_terminal_past_pytests_capture(pytester: pytest.Pytester) -> None:
    # Written from inside a passing test (pytest's call phase, output captured): were it captured, it would be
    # discarded with the passing test's output instead of shown.
    pytester.makepyfile(
        """
        import qualify.progress as progress
        from qualify.plugin import _item_progress

        def test_inner(request, monkeypatch):
            monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0)
            report = _item_progress(request.config, "gate[cell]")
            report("sequences", 3, 8)
            report.close()
        """
    )
    result = pytester.runpytest_subprocess("-v")
    result.assert_outcomes(passed=1)
    assert any(line.startswith("progress: gate[cell]  sequences 3/8") for line in result.outlines), result.outlines


def test_moving_shared_time_keeps_the_items_total() -> None:
    item = ItemResult("n", "n", "g", None, "compare", "g.yaml", [], "", Status.PASSED, None, 12.0)
    _move_to_shared(item, 10.0)
    assert (item.duration_s, item.shared_setup_s) == (2.0, 10.0)
    _move_to_shared(item, 5.0)  # never more than the item spent
    assert (item.duration_s, item.shared_setup_s) == (0.0, 12.0)
