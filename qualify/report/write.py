"""Write the report (and its DSSE envelope) without ever overwriting an earlier one."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from qualify.errors import QualifyError
from qualify.report.build import build_report, collect_inputs
from qualify.report.provenance import collect_provenance

if TYPE_CHECKING:
    from qualify.plugin import SessionState


def _stem(state: SessionState) -> str:
    if state.report_name:
        return state.report_name
    suites = sorted({c.gate_file.suite for c in state.compiled}) or ["qualify"]
    suite = re.sub(r"[^A-Za-z0-9_.-]+", "-", "+".join(suites))[:80]
    return f"{suite}-{state.started_at.strftime('%Y%m%dT%H%M%SZ')}"


def _write_new(path: Path, data: bytes) -> None:
    """Create `path` exclusively, so two runs never clobber each other's report."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def write_report(state: SessionState) -> None:
    from qualify.signing import Subject, sign_report
    from qualify.signing.keys import load_private_key

    assert state.out_dir is not None
    state.out_dir.mkdir(parents=True, exist_ok=True)
    stem = _stem(state)
    report_path = state.out_dir / f"{stem}.json"
    envelope_path = state.out_dir / f"{stem}.dsse.json"
    if report_path.exists() or envelope_path.exists():
        raise QualifyError(f"{report_path}: a report with this name exists already; choose another --name")

    private_key = load_private_key(state.sign_key) if state.sign_key else None
    provenance = collect_provenance(
        argv=state.argv,
        repo_root=Path.cwd(),
        started_at=state.started_at,
        finished_at=state.finished_at,
    )
    provenance_dict = provenance if isinstance(provenance, dict) else provenance.model_dump(mode="json")
    report = build_report(state, provenance_dict, signed=private_key is not None)
    if private_key is None:
        _write_new(report_path, json.dumps(report, indent=2, sort_keys=True).encode() + b"\n")
    else:
        subjects = [
            Subject.model_validate({"name": f"{i.role}:{i.name}", "digest": {"sha256": i.sha256}})
            for i in collect_inputs(state)
        ]
        report_bytes, envelope_bytes = sign_report(report, subjects, private_key, report_name=report_path.name)
        _write_new(report_path, report_bytes)
        _write_new(envelope_path, envelope_bytes)
        state.envelope_path = envelope_path
    state.report_path = report_path
