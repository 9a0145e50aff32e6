"""Which shard runs which compiled item.

Without durations an item's shard is its id's sha256 modulo the shard count: the same item lands on the same
shard whatever else the gate files compile to, so adding a gate moves nothing. With the item durations of a
previous report, items are placed longest first on the least loaded shard (ties by id), which balances wall time;
items that report does not know take the median of those it does.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.errors import QualifyError
from qualify.hashing import sha256_file
from qualify.json_limits import read_bounded

# How an item another shard runs is recorded in this shard's report; `qualify merge` recognizes it.
SHARD_REASON = "runs in shard"
_SPEC = re.compile(r"^([1-9][0-9]{0,3})/([1-9][0-9]{0,3})$")


@dataclass(frozen=True)
class ShardSpec:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> ShardSpec:
        m = _SPEC.match(text.strip())
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            raise QualifyError(f"--shard {text!r}: expected K/N with 1 <= K <= N (e.g. 2/4)")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def by_id(name: str, count: int) -> int:
    """1-based shard of item `name` when no durations are given."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % count + 1


def read_durations(path: Path) -> dict[str, float]:
    """Each item's own duration (plus its share of set-up) in a previous plain report."""
    try:
        report = json.loads(read_bounded(path))
    except (OSError, ValueError) as exc:
        raise QualifyError(f"{path}: cannot read a report's item durations: {exc}") from None
    items = report.get("items") if isinstance(report, dict) else None
    if not isinstance(items, list):
        raise QualifyError(f"{path}: not a qualification report (no items)")
    out: dict[str, float] = {}
    for item in items:
        d = item.get("duration_s") if isinstance(item, dict) else None
        if isinstance(d, (int, float)) and d >= 0 and isinstance(item.get("name"), str):
            shared = item.get("shared_setup_s")
            out[item["name"]] = float(d) + (float(shared) if isinstance(shared, (int, float)) else 0.0)
    if not out:
        raise QualifyError(f"{path}: no item durations recorded (report format 3 records them)")
    return out


def assign(names: list[str], count: int, durations: dict[str, float] | None = None) -> dict[str, int]:
    """Every name's 1-based shard."""
    if durations is None:
        return {n: by_id(n, count) for n in names}
    default = statistics.median(durations.values())
    load = [0.0] * count
    held = [0] * count
    out: dict[str, int] = {}
    for name in sorted(names, key=lambda n: (-durations.get(n, default), n)):
        # Least loaded first; among equal loads (items that took no measurable time) the one holding fewest.
        shard = min(range(count), key=lambda s: (load[s], held[s], s))
        load[shard] += durations.get(name, default)
        held[shard] += 1
        out[name] = shard + 1
    return out


@dataclass(frozen=True)
class ShardPlan:
    spec: ShardSpec
    assignment: dict[str, int]
    durations_from: str | None  # sha256 of the report the durations came from

    @classmethod
    def make(cls, spec: ShardSpec, names: list[str], durations_path: Path | None) -> ShardPlan:
        durations = read_durations(durations_path) if durations_path else None
        digest = sha256_file(durations_path) if durations_path else None
        return cls(spec, assign(names, spec.count, durations), digest)

    def owns(self, name: str) -> bool:
        return self.assignment.get(name) == self.spec.index

    def to_report(self) -> dict[str, Any]:
        return {
            "index": self.spec.index,
            "count": self.spec.count,
            "assignment": "durations" if self.durations_from else "sha256-mod",
            "durations_from": self.durations_from,
            "items": sorted(n for n, s in self.assignment.items() if s == self.spec.index),
        }
