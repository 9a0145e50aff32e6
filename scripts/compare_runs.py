"""Whether two plain reports of the same gate files agree: a serial run beside a `--gpus` run (or two shards' merge
beside one unsharded run). Prints one table: verdict, counts and wall time of each, the time ratio, the items whose
status differs, and how many items measured exactly the same values. Exit 0 when the verdicts, the counts and every
item's status agree, 1 when they do not, 2 on unreadable input.

    python3 scripts/compare_runs.py SERIAL.json SPREAD.json [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _load(path: Path) -> dict[str, Any]:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: not a readable report ({exc})") from None
    if not isinstance(report, dict) or not isinstance(report.get("items"), list):
        raise SystemExit(f"{path}: not a qualify report (no 'items' list)")
    for field in ("verdict", "counts"):
        if field not in report:
            raise SystemExit(f"{path}: not a qualify report (no '{field}')")
    for n, item in enumerate(report["items"]):
        if not isinstance(item, dict) or not all(k in item for k in ("name", "status")):
            raise SystemExit(f"{path}: items[{n}] has no name or status")
    return report


def _key(item: dict[str, Any]) -> str:
    # Gate ids are unique within a file, not across files; the node id does not name the file of a gate file
    # outside pytest's root directory, so the item's gate file does.
    return f"{item.get('gate_file')}::{item['name']}"


def _by_key(report: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    items: dict[str, dict[str, Any]] = {}
    duplicates = []
    for item in report["items"]:
        key = _key(item)
        if key in items:
            duplicates.append(key)
        items[key] = item
    return items, duplicates


def _status_counts(report: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in report["items"]:
        counts[item["status"]] = counts.get(item["status"], 0) + 1
    return dict(sorted(counts.items()))


def _observed(item: dict[str, Any]) -> list[Any]:
    return [c.get("observed") for c in item.get("checks", [])]


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The agreement of two reports: differing statuses by item, items present in one only or twice in one, the
    reports' own counts and those the items give, and timings."""
    items_a, dup_a = _by_key(a)
    items_b, dup_b = _by_key(b)
    common = [k for k in items_a if k in items_b]
    differ = [
        {"item": k, "a": items_a[k]["status"], "b": items_b[k]["status"]}
        for k in common
        if items_a[k]["status"] != items_b[k]["status"]
    ]
    same_values = sum(1 for k in common if _observed(items_a[k]) == _observed(items_b[k]))
    wall = [r.get("provenance", {}).get("duration_s") for r in (a, b)]
    gpus = sorted({str(i.get("gpu")) for i in b["items"] if i.get("gpu") is not None})
    from_items = [_status_counts(a), _status_counts(b)]
    return {
        "verdict": [a["verdict"], b["verdict"]],
        "counts": [a["counts"], b["counts"]],
        "counts_from_items": from_items,
        "wall_s": wall,
        "time_ratio": (wall[1] / wall[0]) if all(isinstance(w, (int, float)) and w for w in wall) else None,
        "only_in_a": sorted(set(items_a) - set(items_b)),
        "only_in_b": sorted(set(items_b) - set(items_a)),
        "duplicates": {"a": sorted(set(dup_a)), "b": sorted(set(dup_b))},
        "status_differs": differ,
        "same_observed_values": same_values,
        "items": len(common),
        "gpus_of_b": gpus,
        "agree": not differ
        and not dup_a
        and not dup_b
        and set(items_a) == set(items_b)
        and a["verdict"] == b["verdict"]
        and a["counts"] == b["counts"]
        and from_items[0] == from_items[1],
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="the reference run (e.g. serial), plain report JSON")
    ap.add_argument("b", type=Path, help="the run to check (e.g. --gpus), plain report JSON")
    ap.add_argument("--json", type=Path, help="also write the comparison here")
    args = ap.parse_args(argv)
    try:
        result = compare(_load(args.a), _load(args.b))
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    ratio = result["time_ratio"]
    print("| run | verdict | counts | wall |")
    print("| --- | --- | --- | --- |")
    for name, verdict, counts, wall in zip(
        (args.a.name, args.b.name), result["verdict"], result["counts"], result["wall_s"], strict=True
    ):
        print(f"| {name} | {verdict} | {json.dumps(counts, sort_keys=True)} | {wall} s |")
    print(f"time ratio (b / a): {ratio:.3f}" if ratio is not None else "time ratio: n/a")
    print(f"items: {result['items']}, same observed values: {result['same_observed_values']}, "
          f"GPUs of b: {','.join(result['gpus_of_b']) or '-'}")  # fmt: skip
    for d in result["status_differs"]:
        print(f"status differs: {d['item']}: {d['a']} vs {d['b']}")
    for side in ("only_in_a", "only_in_b"):
        for name in result[side]:
            print(f"{side.replace('_', ' ')}: {name}")
    for side, names in result["duplicates"].items():
        for name in names:
            print(f"twice in {side}: {name}")
    if result["verdict"][0] != result["verdict"][1]:
        print(f"verdict differs: {result['verdict'][0]} vs {result['verdict'][1]}")
    print("AGREE" if result["agree"] else "DISAGREE")
    return 0 if result["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
