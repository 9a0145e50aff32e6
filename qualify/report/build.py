"""Assemble the JSON report of one run from the session's results and the host's provenance."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qualify import __version__
from qualify.report.paths import as_reported, repository_root
from qualify.report.schema import REPORT_VERSION
from qualify.results import InputRef, Status

if TYPE_CHECKING:
    from qualify.session import SessionState

REPORT_FORMAT = "cartridge-qualify/report"


def collect_inputs(state: SessionState) -> list[InputRef]:
    """Every file that was qualified, once each, plus the gate files that declared the run."""
    seen: dict[tuple[str, str], InputRef] = {}
    for compiled in state.compiled:
        gf = compiled.gate_file
        seen.setdefault((gf.path, gf.sha256), InputRef(Path(gf.path).name, gf.path, gf.sha256, "gate-file"))
    for r in state.results:
        for ref in r.outcome.inputs if r.outcome else []:
            seen.setdefault((ref.path, ref.sha256), ref)
    return sorted(seen.values(), key=lambda i: (i.role, i.path))


NON_RELEASE_REASON = "marked non-release (development key or --non-release)"


def release_status(state: SessionState, signed: bool) -> dict[str, Any]:
    if state.non_release:
        return {"is_release": False, "reason": NON_RELEASE_REASON}
    if not state.strict:
        return {"is_release": False, "reason": "not a --strict run"}
    if not signed:
        return {"is_release": False, "reason": "unsigned"}
    return {"is_release": True, "reason": "strict, signed run"}


def relative_item(item: dict[str, Any], root: Path) -> dict[str, Any]:
    """An item as reported: its gate file and input paths inside the repository relative to `root`."""
    inputs = [{**i, "path": as_reported(i["path"], root)} for i in item["inputs"]]
    return {**item, "gate_file": as_reported(item["gate_file"], root), "inputs": inputs}


def build_report(
    state: SessionState, provenance: dict[str, Any], *, signed: bool, root: Path | None = None
) -> dict[str, Any]:
    """The report; file paths inside the repository (`root`, found from the working directory) are relative."""
    root = repository_root() if root is None else root
    counts = Counter(r.status.value for r in state.results)
    return {
        "report_format": REPORT_FORMAT,
        "report_version": REPORT_VERSION,
        "tool": {"name": "cartridge-qualify", "version": __version__},
        "verdict": state.verdict.value,
        "strict": state.strict,
        "release": release_status(state, signed),
        "signed": signed,
        "seed": state.seed,
        "counts": {
            **{s.value: counts.get(s.value, 0) for s in Status},
            "total": len(state.results),
        },
        "suites": sorted({c.gate_file.suite for c in state.compiled}),
        "gate_files": [
            {
                "path": as_reported(c.gate_file.path, root),
                "sha256": c.gate_file.sha256,
                "suite": c.gate_file.suite,
                "version": c.gate_file.version,
                "items": len(c.items),
            }
            for c in state.compiled
        ],
        "collect_errors": list(state.collect_errors),
        "coverage": {
            "rows": [row.to_dict() for row in state.coverage],
            "unqualified": state.unqualified_specializations,
        },
        "items": [relative_item(r.to_dict(), root) for r in state.results],
        "inputs": [
            {"name": i.name, "path": as_reported(i.path, root), "sha256": i.sha256, "role": i.role}
            for i in collect_inputs(state)
        ],
        "provenance": provenance,
        **({"shard": state.shard_plan.to_report()} if state.shard_plan is not None else {}),
    }
