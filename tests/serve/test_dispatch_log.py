"""The engine's dispatch log: each variant the backend plans is written once, and the worker reads them back."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.serve.dispatch_log import (
    DIRECT_LAUNCH_NOTE,
    DISPATCH_LOG_ENV,
    DispatchLog,
    direct_launches_seen,
    read_dispatch_events,
    read_dispatch_log,
    read_dispatch_notes,
)


def test_each_new_key_is_written_once_and_read_back_sorted(tmp_path: Path) -> None:
    path = tmp_path / "dispatch.log"
    first, second = DispatchLog(str(path)), DispatchLog(str(path))  # two engine processes sharing the file
    for key in ("prefill/b", "decode/a", "prefill/b", "decode/a"):
        first.record(key)
    second.record("decode/a")
    second.record("decode/c")
    assert path.read_text().splitlines() == ["prefill/b", "decode/a", "decode/a", "decode/c"]
    assert read_dispatch_log(path) == ["decode/a", "decode/c", "prefill/b"]


def test_without_the_variable_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISPATCH_LOG_ENV, raising=False)
    log = DispatchLog()
    log.record("decode/a")
    assert log.path is None and list(tmp_path.iterdir()) == []
    assert read_dispatch_log(tmp_path / "never-written.log") == []
    monkeypatch.setenv(DISPATCH_LOG_ENV, str(tmp_path / "from-env.log"))
    DispatchLog().record("decode/a")
    assert read_dispatch_log(tmp_path / "from-env.log") == ["decode/a"]


def test_notes_and_events_are_never_read_as_keys(tmp_path: Path) -> None:
    path = tmp_path / "dispatch.log"
    log = DispatchLog(str(path))
    log.record("decode/k")
    for mode in ("FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE", "PIECEWISE"):
        log.note("cudagraph_mode", mode)
    for value in ("0", "624", "624"):
        log.event("cartridge_positions_cached", value)
    other = DispatchLog(str(path))  # a second writer (another engine process) appends to the same file
    other.event("cartridge_positions_cached", "8")
    assert read_dispatch_log(path) == ["decode/k"]
    assert read_dispatch_notes(path) == {"cudagraph_mode": ["FULL_AND_PIECEWISE", "PIECEWISE"]}
    assert read_dispatch_events(path, "cartridge_positions_cached") == ["0", "624", "624", "8"]  # every one, in order
    assert read_dispatch_events(path, "other") == []


def test_direct_launches_are_seen_only_once_the_backend_noted_one(tmp_path: Path) -> None:
    path = tmp_path / "dispatch.log"
    assert not direct_launches_seen(path)  # no engine wrote the file
    log = DispatchLog(str(path))
    log.record("decode/k")
    log.note("cudagraph_mode", "FULL_AND_PIECEWISE")
    log.event(DIRECT_LAUNCH_NOTE, "seen")  # an event of that name is not the note
    assert not direct_launches_seen(path)
    DispatchLog(str(path)).note(DIRECT_LAUNCH_NOTE, "seen")  # one layer of another engine process
    assert direct_launches_seen(path) and read_dispatch_log(path) == ["decode/k"]
