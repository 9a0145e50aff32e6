"""qualify.serve.gc_pauses: the collector's pauses inside a block are counted by generation and timed."""

from __future__ import annotations

import gc
import random

from qualify.serve.gc_pauses import gc_pauses


def _cycles(n: int) -> None:
    for _ in range(n):
        a: list = []
        a.append(a)  # a reference cycle: only the collector frees it


def test_collections_inside_the_block_are_counted_and_timed() -> None:
    runs = random.randint(2, 5)
    with gc_pauses() as seen:
        _cycles(1000)
        for _ in range(runs):
            gc.collect()  # full collections
        gc.collect(0)
    assert seen.collections[2] >= runs and seen.collections[0] >= 1
    assert seen.pause_s > 0.0


def test_nothing_is_counted_outside_the_block_and_the_callback_is_removed() -> None:
    before = list(gc.callbacks)
    with gc_pauses() as seen:
        pass
    gc.collect()
    assert seen.collections == [0, 0, 0] and seen.pause_s == 0.0
    assert gc.callbacks == before
