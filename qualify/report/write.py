"""Write the report (and its DSSE envelope) without ever overwriting an earlier one."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qualify.errors import QualifyError
from qualify.report.build import build_report
from qualify.report.provenance import collect_provenance

if TYPE_CHECKING:
    from qualify.session import SessionState

# A plain file name: no separator, no `..`, no leading dot (hidden, or `.`/`..` themselves), a charset
# that means the same to every shell and file system. The default stem (suite + time) fits it.
_REPORT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")


class ReportWriteError(QualifyError):
    """The report cannot be written where it was asked to go (the name, the folder, or the disk)."""


def check_report_name(name: str) -> None:
    """ReportWriteError unless `name` is a plain file name stem that stays inside the report folder."""
    if not _REPORT_NAME.match(name) or ".." in name:
        raise ReportWriteError(
            f"report name {name[:80]!r} is not a plain file name: use letters, digits, '_', '-', '.' and '+', "
            "start with a letter or digit, no '..', at most 128 characters"
        )


def check_output(out_dir: Path, name: str | None) -> None:
    """Before any gate runs: `out_dir` exists or can be created, a file can be created in it, and a
    report called `name` (when given) is not there already. ReportWriteError says which failed."""
    if name is not None:
        check_report_name(name)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        # Created and removed at once: access() says nothing about read-only mounts, ACLs or root.
        fd, probe = tempfile.mkstemp(dir=out_dir, prefix=".qualify-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ReportWriteError(f"{out_dir}: cannot write reports here: {e.strerror or e}") from None
    if name is not None:
        for path in (out_dir / f"{name}.json", out_dir / f"{name}.dsse.json"):
            if path.exists() or path.is_symlink():
                raise ReportWriteError(f"{path}: a report with this name exists already; choose another --name")


def _stem(state: SessionState, suites: list[str]) -> str:
    if state.report_name:
        check_report_name(state.report_name)
        return state.report_name
    return f"{default_run_name(suites)}-{state.started_at.strftime('%Y%m%dT%H%M%SZ')}"


def default_run_name(suites: list[str]) -> str:
    """The suite's name for a one-suite run; `qualify` for several (the report lists them), never a cut-off join."""
    suites = sorted(set(suites))
    if len(suites) != 1:
        return "qualify"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", suites[0]).strip("-.")[:80]
    return name if name and name[0].isalnum() else "qualify"


def write_new(path: Path, data: bytes) -> None:
    """Create `path` exclusively, so two runs never clobber each other's report."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise ReportWriteError(f"{path}: a report with this name exists already; choose another --name") from None
    except OSError as e:
        raise ReportWriteError(f"{path}: cannot create report file: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError as e:
        # A half-written report must not stay behind looking like one (nor block a rerun under its name).
        with contextlib.suppress(OSError):
            path.unlink()
        raise ReportWriteError(f"{path}: cannot write report file: {e.strerror or e}") from None


def write_report(state: SessionState, build: Callable[[dict[str, Any], bool], dict[str, Any]] | None = None) -> None:
    """Write the run's report (signed when the run has a key). `build(provenance, signed)` makes it instead
    of `build_report`: the controller of a `--gpus` run merges its workers' parts."""
    from qualify.signing import Subject, sign_report
    from qualify.signing.keys import load_private_key

    assert state.out_dir is not None
    suites = [c.gate_file.suite for c in state.compiled]
    suites += [s for p in (state.worker_parts or {}).values() for s in (p.get("report") or {}).get("suites") or []]
    stem = _stem(state, suites)
    try:
        state.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportWriteError(f"{state.out_dir}: cannot create report folder: {e.strerror or e}") from None
    report_path = state.out_dir / f"{stem}.json"
    envelope_path = state.out_dir / f"{stem}.dsse.json"
    if report_path.exists() or envelope_path.exists():
        raise ReportWriteError(f"{report_path}: a report with this name exists already; choose another --name")

    private_key = load_private_key(state.sign_key) if state.sign_key else None
    provenance = collect_provenance(
        argv=state.argv,
        repo_root=Path.cwd(),
        started_at=state.started_at,
        finished_at=state.finished_at,
        sign_key=state.sign_key,
    )
    provenance_dict = provenance if isinstance(provenance, dict) else provenance.model_dump(mode="json")
    if build is None:
        report = build_report(state, provenance_dict, signed=private_key is not None)
    else:
        report = build(provenance_dict, private_key is not None)
    if private_key is None:
        write_new(report_path, json.dumps(report, indent=2, sort_keys=True).encode() + b"\n")
    else:
        # The report's own inputs (`collect_inputs`, or the workers' merged): a subject per qualified file.
        subjects = [
            Subject.model_validate({"name": f"{i['role']}:{i['name']}", "digest": {"sha256": i["sha256"]}})
            for i in report["inputs"]
        ]
        report_bytes, envelope_bytes = sign_report(report, subjects, private_key, report_name=report_path.name)
        write_new(report_path, report_bytes)
        write_new(envelope_path, envelope_bytes)
        state.envelope_path = envelope_path
    state.report_path = report_path
