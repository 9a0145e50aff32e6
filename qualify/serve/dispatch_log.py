"""Which compiled variants of the fused kernel an engine launched, written where the engine's parent can read.

vLLM runs the model in its own process (the engine core), so the backend cannot hand its plans back to the
perf worker that started the engine. Each metadata builder appends every specialization key it plans for the
first time to the file named by ``QUALIFY_DISPATCH_LOG`` (one key per line); the worker reads the file after its
timed batches. Keys come from the kernel's own plan (`cartridge_attn.dispatch.specialization_of`). Lines that
start with ``#`` are facts about the engine core the worker cannot see otherwise (the CUDA-graph mode vLLM
resolved for this backend, the KV cache layout, the prefill implementations, direct launches), read by
`read_dispatch_notes`; lines that start with ``@`` are events in the order
they happened (the cartridge positions each request found in vLLM's prefix cache), read by `read_dispatch_events`.
Neither is ever taken for a key.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from qualify.serve.scoped_env import scoped_env

DISPATCH_LOG_ENV = "QUALIFY_DISPATCH_LOG"


class DispatchLog:
    """Appends each new key once; a no-op when the variable is unset (serving outside a measurement)."""

    def __init__(self, path: str | None = None) -> None:
        chosen = path if path is not None else os.environ.get(DISPATCH_LOG_ENV)
        self.path = Path(chosen) if chosen else None
        self._seen: set[str] = set()

    def record(self, key: str) -> None:
        if self.path is None or key in self._seen:
            return
        self._seen.add(key)
        # One short write per new variant, opened in append mode so several engine processes can share a file.
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(key + "\n")

    def note(self, name: str, value: str) -> None:
        """Record ``name = value`` once per distinct pair."""
        self.record(f"{NOTE}{name}={value}")

    def event(self, name: str, value: str) -> None:
        """Record ``name = value`` every time (an event, in order)."""
        if self.path is None:
            return
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(f"{EVENT}{name}={value}\n")


NOTE = "# "
EVENT = "@ "
# The inject connector's event per cartridge prompt: how many cartridge positions vLLM's prefix cache held for it.
CACHED_EVENT = "cartridge_positions_cached"
# The fused backend's note once a layer launched a kernel variant directly (cartridge_attn.launch).
DIRECT_LAUNCH_NOTE = "direct_launches"
# The fused backend's notes of the KV cache layout vLLM named (NHD or HND), of the order in memory of the cache its
# kernels read (the same names, from the cache tensor's strides), and of each prefill implementation it planned
# (cartridge_attn's impl names: "gluon", "triton").
KV_CACHE_LAYOUT_NOTE = "kv_cache_layout"
KV_CACHE_ORDER_NOTE = "kv_cache_order"
PREFILL_IMPL_NOTE = "prefill_impl"


def _lines(path: Path) -> list[str]:
    try:
        return [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except FileNotFoundError:
        return []


def read_dispatch_log(path: Path) -> list[str]:
    """The distinct keys in `path`, sorted; none when the file was never written."""
    return sorted({ln for ln in _lines(path) if not ln.startswith((NOTE.strip(), EVENT.strip()))})


def read_dispatch_notes(path: Path) -> dict[str, list[str]]:
    """Every value recorded for each note name, sorted."""
    notes: dict[str, set[str]] = {}
    for ln in _lines(path):
        if ln.startswith(NOTE.strip()):
            name, _, value = ln[len(NOTE.strip()) :].strip().partition("=")
            notes.setdefault(name, set()).add(value)
    return {k: sorted(v) for k, v in notes.items()}


def read_dispatch_events(path: Path, name: str) -> list[str]:
    """The values of every `name` event in `path`, in the order they were recorded."""
    out = []
    for ln in _lines(path):
        if ln.startswith(EVENT.strip()):
            key, _, value = ln[len(EVENT.strip()) :].strip().partition("=")
            if key == name:
                out.append(value)
    return out


@contextlib.contextmanager
def dispatch_log_in(folder: Path) -> Iterator[Path]:
    """Point the engines this process starts at a dispatch log in `folder` (their processes inherit the variable)."""
    path = folder / "dispatch.log"
    with scoped_env(DISPATCH_LOG_ENV, str(path)):
        yield path


def cartridge_positions(path: Path) -> list[int]:
    """For every cartridge prompt the inject connector saw, in order: the cartridge positions vLLM's prefix cache
    held for it (vLLM's own per-request cached count adds the connector's positions to the cache's)."""
    return [int(v) for v in read_dispatch_events(path, CACHED_EVENT)]


def direct_launches_seen(path: Path) -> bool:
    """Whether an engine writing to `path` launched any fused-kernel variant directly."""
    return DIRECT_LAUNCH_NOTE in read_dispatch_notes(path)
