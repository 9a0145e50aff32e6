"""The mutation report: one row per mutant, the score and a verdict, signed like a qualification report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from qualify import __version__
from qualify.mutation.catalog import LoadedCatalog, Mutant
from qualify.mutation.execute import ChildRun, MutantStatus

MUTATION_REPORT_FORMAT = "cartridge-qualify/mutation-report"
# 2: the unmutated copy's scope and items (`baseline.scope`, `baseline.items`); 3: the items each run had out of GPU
# memory (`out_of_memory`), and a run left inconclusive by them that went again alone (`retried_alone`: the first)
MUTATION_REPORT_VERSION = 3


def final_status(m: Mutant, run: ChildRun) -> MutantStatus:
    """A survivor the catalog argues equivalent is EQUIVALENT; every other status stands."""
    if run.status is MutantStatus.SURVIVED and m.equivalent:
        return MutantStatus.EQUIVALENT
    return run.status


def mutant_row(
    m: Mutant, run: ChildRun, edited_sha256: str | None, first_run: ChildRun | None = None
) -> dict[str, Any]:
    """The mutant's row; `first_run`: the run that ran out of GPU memory beside others, when `run` went again alone."""
    row = {
        "id": m.id,
        "category": m.category,
        "description": m.description,
        "file": m.file,
        "find": m.find,
        "replace": m.replace,
        "occurrence": m.occurrence,
        "edited_sha256": edited_sha256,
        "equivalence_argument": m.equivalent,
        **run.to_dict(),
    }
    row["retried_alone"] = first_run.to_dict() if first_run is not None else None
    row["status"] = final_status(m, run).value
    if m.equivalent and run.status is MutantStatus.KILLED:
        row["reason"] = "declared equivalent in the catalog but the gate killed it: the argument is wrong"
    return row


def summarize(baseline: ChildRun, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts, score (killed / (killed + survived)) and verdict.

    PASS: the unmutated kernel passed and every mutant was killed or argued equivalent. FAIL: the gate failed the
    unmutated kernel (with `--unmutated killing-items`: an item that killed a mutant failed it) or its run broke, a
    mutant survived, or one argued equivalent was killed. INCOMPLETE: otherwise (inconclusive or broken children, or
    an inconclusive unmutated run: an item out of GPU memory, or a killing item that did not run), since nothing was
    shown for those. A mutant killed only by items that errored (no check failed: the run crashed, for instance on
    an illegal memory access) counts as killed, as mutation tools count a crash, and is listed in
    ``killed_only_by_errors`` with the errors, since an error could also be the host's; one killed only by items
    that ran out of GPU memory is inconclusive (`execute.classify`).
    """
    counts = Counter(r["status"] for r in rows)
    killed, survived = counts.get("killed", 0), counts.get("survived", 0)
    contradicted = [r["id"] for r in rows if r["equivalence_argument"] and r["status"] == "killed"]
    # An inconclusive unmutated run showed neither a pass nor a failure of the gate.
    if baseline.status not in (MutantStatus.SURVIVED, MutantStatus.INCONCLUSIVE) or survived or contradicted:
        verdict = "FAIL"
    elif baseline.status is MutantStatus.INCONCLUSIVE or counts.get("inconclusive", 0) or counts.get("broken", 0):
        verdict = "INCOMPLETE"
    else:
        verdict = "PASS"
    return {
        "verdict": verdict,
        "counts": {s.value: counts.get(s.value, 0) for s in MutantStatus} | {"total": len(rows)},
        "score": (killed / (killed + survived)) if killed + survived else None,
        "survivors": [r["id"] for r in rows if r["status"] == "survived"],
        "killed_only_by_errors": [
            r["id"] for r in rows if r["status"] == "killed" and all(k["status"] == "error" for k in r["killed_by"])
        ],
        "equivalence_contradicted": contradicted,
    }


def _as_baseline(run: dict[str, Any]) -> dict[str, Any]:
    # For the unmutated copy, "survived" means the gate passed it and "killed" that the gate failed it.
    return {**run, "status": {"survived": "passed", "killed": "failed"}.get(run["status"], run["status"])}


def build_mutation_report(
    loaded: LoadedCatalog,
    *,
    target_tree_sha256: str,
    gate_files: Sequence[tuple[str, str]],
    baseline: ChildRun,
    baseline_first_run: ChildRun | None = None,
    rows: Sequence[dict[str, Any]],
    seed: int,
    baseline_items: Sequence[str] | None = None,
    stop_at_first_failure: bool,
    provenance: dict[str, Any],
    catalog_path: str,
) -> dict[str, Any]:
    summary = summarize(baseline, rows)
    return {
        "report_format": MUTATION_REPORT_FORMAT,
        "report_version": MUTATION_REPORT_VERSION,
        "tool": {"name": "cartridge-qualify", "version": __version__},
        **summary,
        "catalog": {"path": catalog_path, "sha256": loaded.sha256, "mutants": len(loaded.catalog.mutants)},
        "target": {"path": loaded.catalog.target, "tree_sha256": target_tree_sha256},
        "gate_files": [{"path": p, "sha256": h} for p, h in gate_files],
        "seed": seed,
        "stop_at_first_failure": stop_at_first_failure,
        "baseline": {
            "description": "the unmutated copy of the target",
            # Which items the unmutated copy ran: every one, or (`qualify mutants --unmutated killing-items`) those
            # that killed a mutant, by node id, each of which it must pass for the kill to count.
            "scope": "whole-gate" if baseline_items is None else "killing-items",
            "items": list(baseline_items) if baseline_items is not None else None,
            **_as_baseline(baseline.to_dict()),
            "retried_alone": _as_baseline(baseline_first_run.to_dict()) if baseline_first_run is not None else None,
        },
        "mutants": list(rows),
        "provenance": provenance,
    }


def _by_errors(report: dict[str, Any]) -> str:
    only = report.get("killed_only_by_errors") or []
    return f" ({len(only)} only by items that errored: {', '.join(only)})" if only else ""


def _baseline_scope(baseline: dict[str, Any]) -> str:
    items = baseline.get("items")
    return f" on the {len(items)} items that killed a mutant" if baseline.get("scope") == "killing-items" else ""


def markdown_table(report: dict[str, Any]) -> str:
    """The report as a short Markdown table (for results READMEs and the console)."""
    lines = [
        f"verdict **{report['verdict']}**, score "
        + (f"{report['score']:.3f}" if report["score"] is not None else "n/a")
        + f" ({report['counts']['killed']} killed{_by_errors(report)}, {report['counts']['survived']} survived, "
        f"{report['counts']['equivalent']} equivalent, {report['counts']['inconclusive']} inconclusive, "
        f"{report['counts']['broken']} broken of {report['counts']['total']}); unmutated copy: "
        f"{report['baseline']['status']}{_baseline_scope(report['baseline'])} ({report['baseline']['wall_s']} s)",
        "",
        "| mutant | category | status | first killing item | s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in report["mutants"]:
        first = r["killed_by"][0]["item"] if r["killed_by"] else (r["reason"][:60] or "-")
        lines.append(f"| {r['id']} | {r['category']} | {r['status']} | {first} | {r['wall_s']} |")
    return "\n".join(lines) + "\n"
