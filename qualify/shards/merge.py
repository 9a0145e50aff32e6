"""`qualify merge`: one report from the signed reports of the shards of one run.

Each shard envelope must verify with the given key and carry a qualification report with a `shard` block. The
shards must be 1..N of one N, each exactly once; they must have compiled the same gate files (paths, digests,
suites, versions and item counts) with the same tool version, seed, strictness and baseline, and split them the
same way; and every compiled item must be owned by exactly one shard and listed by every shard. The merged report
holds each item as its owner ran it, the counts and the specialization coverage over all of them, and a verdict
computed from the items: PASS only if every item ran and passed and nothing dispatched is unqualified.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.errors import QualifyError
from qualify.hashing import sha256_file
from qualify.render.view import computed_verdict, coverage_rows
from qualify.report.build import NON_RELEASE_REASON
from qualify.results import Status
from qualify.shard_plan import SHARD_REASON


class ShardMergeError(QualifyError):
    """The shards do not make up one run; the message names the envelope and what differs."""


@dataclass(frozen=True)
class Shard:
    path: Path
    envelope_sha256: str
    report: dict[str, Any]
    keyid: str = ""

    @property
    def block(self) -> dict[str, Any]:
        return self.report["shard"]


def _same(shards: list[Shard], what: str, get: Any) -> Any:
    first = get(shards[0].report)
    for s in shards[1:]:
        if get(s.report) != first:
            raise ShardMergeError(f"{s.path}: {what} differs from {shards[0].path}'s: the shards are not of one run")
    return first


def _baseline(report: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted(
        (i.get("name", ""), i.get("sha256", "")) for i in report.get("inputs") or [] if i.get("role") == "baseline"
    )


def check_shards(shards: list[Shard]) -> None:
    """ShardMergeError unless the shards are every shard of one run, each once."""
    for s in shards:
        if not isinstance(s.report.get("shard"), dict):
            raise ShardMergeError(f"{s.path}: not a shard report (no `shard` block; run it with --shard K/N)")
    count = _same(shards, "the shard count", lambda r: r["shard"].get("count"))
    seen: dict[int, Path] = {}
    for s in shards:
        index = s.block.get("index")
        if index in seen:
            raise ShardMergeError(f"shard {index}/{count} given twice: {seen[index]} and {s.path}")
        seen[index] = s.path
    missing = [i for i in range(1, count + 1) if i not in seen]
    if missing:
        raise ShardMergeError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(f'{i}/{count}' for i in missing)} "
                              f"missing: every shard of the run must be merged")  # fmt: skip
    _same(shards, "the gate files (path, sha256, suite, version, items)", lambda r: r.get("gate_files"))
    _same(shards, "the tool version", lambda r: r.get("tool"))
    _same(shards, "the seed", lambda r: r.get("seed"))
    _same(shards, "the baseline report", _baseline)
    _same(shards, "the assignment (by id or by which report's durations)",
          lambda r: (r["shard"].get("assignment"), r["shard"].get("durations_from")))  # fmt: skip
    names = _same(shards, "the compiled items", lambda r: sorted(i.get("name") for i in r.get("items") or []))
    owners: Counter[str] = Counter()
    for s in shards:
        owned = set(s.block.get("items") or [])
        owners.update(owned)
        for item in s.report.get("items") or []:
            elsewhere = str(item.get("reason") or "").startswith(SHARD_REASON)
            if (item.get("name") in owned) == elsewhere:
                raise ShardMergeError(
                    f"{s.path}: item {item.get('name')} is {'recorded as another shard' if elsewhere else 'run'}"
                    f"'s but the shard {'owns' if elsewhere else 'does not own'} it"
                )
    twice = sorted(n for n, c in owners.items() if c > 1)
    if twice:
        raise ShardMergeError(f"item {twice[0]} is owned by {owners[twice[0]]} shards: every item runs exactly once")
    unowned = sorted(set(names) - set(owners))
    if unowned:
        raise ShardMergeError(f"item {unowned[0]} is owned by no shard ({len(unowned)} such): it never ran")
    if set(owners) - set(names):
        raise ShardMergeError(f"a shard owns {sorted(set(owners) - set(names))[0]}, which no gate file compiles")


def merge_reports(
    shards: list[Shard], *, provenance: dict[str, Any], strict: bool, signed: bool, non_release: bool
) -> dict[str, Any]:
    """The merged report (call `check_shards` first)."""
    ordered = sorted(shards, key=lambda s: s.block["index"])
    owner = {n: s for s in ordered for n in s.block["items"]}
    items = []
    for item in ordered[0].report["items"]:
        mine = owner[item["name"]]
        items.append(next(i for i in mine.report["items"] if i["name"] == item["name"]))
    first = ordered[0].report
    merged: dict[str, Any] = {
        "report_format": first["report_format"],
        "report_version": first["report_version"],
        "tool": first["tool"],
        "strict": strict,
        "signed": signed,
        "seed": first["seed"],
        "suites": first["suites"],
        "gate_files": first["gate_files"],
        "collect_errors": sorted({e for s in ordered for e in s.report.get("collect_errors") or []}),
        "items": items,
        "inputs": _inputs(ordered),
        "provenance": provenance,
    }
    settle(merged)
    merged["release"] = _release(ordered, strict=strict, signed=signed, non_release=non_release)
    merged["merged_from"] = [
        {
            "index": s.block["index"],
            "count": s.block["count"],
            "envelope": s.path.name,
            "envelope_sha256": s.envelope_sha256,
            "signed_by": s.keyid,
            "verdict": s.report.get("verdict"),
            "items": len(s.block["items"]),
            "commit": ((s.report.get("provenance") or {}).get("git") or {}).get("commit"),
            "hostname": (s.report.get("provenance") or {}).get("hostname"),
            "duration_s": (s.report.get("provenance") or {}).get("duration_s"),
        }
        for s in ordered
    ]
    return merged


def settle(report: dict[str, Any]) -> None:
    """Counts, specialization coverage and verdict of a report put together from parts, from its items and
    collect errors alone: PASS only if every item ran and passed and nothing dispatched is unqualified."""
    items = report["items"]
    counts = Counter(i.get("status") for i in items)
    report["counts"] = {**{s.value: counts.get(s.value, 0) for s in Status}, "total": len(items)}
    rows = coverage_rows(report)
    report["coverage"] = {
        "rows": [{"specialization": k, "qualified_by": q, "dispatched_by": d} for k, q, d in rows],
        "unqualified": [k for k, q, d in rows if d and not q],
    }
    report["verdict"] = "FAIL" if report["collect_errors"] else computed_verdict(report)


def _release(shards: list[Shard], *, strict: bool, signed: bool, non_release: bool) -> dict[str, Any]:
    # Shards never run --strict (a shard is part of a release run); the merge decides, as `qualify run` does.
    marked = [s for s in shards if (s.report.get("release") or {}).get("reason") == NON_RELEASE_REASON]
    if non_release or marked:
        return {"is_release": False, "reason": NON_RELEASE_REASON}
    if not strict:
        return {"is_release": False, "reason": "not a --strict merge"}
    if not signed:
        return {"is_release": False, "reason": "unsigned"}
    return {"is_release": True, "reason": "strict, signed merge of every shard"}


def _inputs(shards: list[Shard]) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for s in shards:
        for i in s.report.get("inputs") or []:
            seen.setdefault((i.get("role", ""), i.get("name", ""), i.get("sha256", "")), i)
    return [seen[k] for k in sorted(seen)]


def load_shard(path: Path, public_keys: list[Path]) -> Shard:
    """A shard envelope verified by one of `public_keys`; ShardMergeError when none verifies it or it holds no
    qualification report."""
    from qualify.signing import verify_envelope_file
    from qualify.signing.intoto import PREDICATE_TYPE

    problems = []
    for key in public_keys:
        try:
            verified = verify_envelope_file(path, key)
            break
        except QualifyError as exc:
            problems.append(exc.diagnostics())
    else:
        raise ShardMergeError(f"{path}: does not verify with any given key: {problems[-1]}")
    if verified.statement.predicate_type != PREDICATE_TYPE:
        raise ShardMergeError(f"{path}: a {verified.statement.predicate_type}, not a qualification report")
    return Shard(path, sha256_file(path), verified.statement.predicate, verified.keyid)
