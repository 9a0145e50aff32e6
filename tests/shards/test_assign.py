"""Which shard runs which item: stable by id, balanced by durations, each item exactly once."""

from __future__ import annotations

import random

import pytest

from qualify.errors import QualifyError
from qualify.shard_plan import ShardSpec, assign


@pytest.fixture
def rng(test_seed: int) -> random.Random:
    return random.Random(test_seed)


def _names(rng: random.Random, n: int) -> list[str]:
    return [f"gate-{rng.randrange(10**6)}[cell-{i}]" for i in range(n)]


def test_every_item_gets_one_shard_and_adding_items_moves_none(rng: random.Random) -> None:
    names = _names(rng, 200)
    before = assign(names, 4)
    assert sorted(before) == sorted(names) and set(before.values()) == {1, 2, 3, 4}
    after = assign([*names, *_names(rng, 50)], 4)
    assert all(after[n] == before[n] for n in names)
    assert max(list(before.values()).count(s) for s in range(1, 5)) < 80  # roughly even by hash alone


def test_durations_balance_the_shards_longest_first(rng: random.Random) -> None:
    names = _names(rng, 60)
    durations = {n: rng.expovariate(1 / 30) for n in names[:50]}  # 10 items the earlier report never ran
    got = assign(names, 3, durations)
    median = sorted(durations.values())[len(durations) // 2]
    load = [sum(durations.get(n, median) for n in names if got[n] == s) for s in (1, 2, 3)]
    biggest = max([*durations.values(), median])
    assert max(load) - min(load) <= biggest  # the greedy bound: never more than one item apart
    assert got == assign(list(reversed(names)), 3, durations)  # the order items are listed in does not matter


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/0", "-1/2", " 2/2x"])
def test_a_bad_shard_is_refused(text: str) -> None:
    with pytest.raises(QualifyError, match="expected K/N"):
        ShardSpec.parse(text)
    assert str(ShardSpec.parse("2/5")) == "2/5"
