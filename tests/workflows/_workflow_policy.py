"""Security rules for the workflows, checked on the parsed YAML (so a test can also feed it bad variants)."""

from __future__ import annotations

import re
from typing import Any

FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"
LABEL_GUARD = "github.event.label.name == 'gpu-qualify'"
GPU_LABELS = ["self-hosted", "linux", "x64", "gpu", "sm90"]
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@(v\d+(\.\d+)*|[0-9a-f]{40})$")
_ELEVATED = {"id-token", "attestations"}


def triggers(workflow: dict[str, Any]) -> dict[str, Any]:
    # PyYAML reads the bare key `on` as the boolean True (YAML 1.1).
    on = workflow.get("on", workflow.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return dict(on or {})


def _runs_on_self_hosted(job: dict[str, Any]) -> bool:
    runs_on = job.get("runs-on")
    labels = runs_on if isinstance(runs_on, list) else [runs_on]
    return "self-hosted" in labels


def _secret_env(step: dict[str, Any]) -> list[str]:
    return [name for name, value in (step.get("env") or {}).items() if "secrets." in str(value)]


def problems(workflow: dict[str, Any]) -> list[str]:
    """Every rule the workflow breaks, as readable lines; empty means it passes."""
    out = []
    on = triggers(workflow)
    if "pull_request_target" in on or "workflow_run" in on:
        out.append("uses pull_request_target/workflow_run, which run with secrets on untrusted code")
    top = workflow.get("permissions")
    if top not in ({}, {"contents": "read"}):
        out.append(f"top-level permissions must be {{}} or contents: read, not {top!r}")
    for name, job in (workflow.get("jobs") or {}).items():
        perms = job.get("permissions", top)
        if not isinstance(perms, dict):
            out.append(f"job {name}: permissions must be an explicit mapping, not {perms!r}")
            perms = {}
        writes = {scope for scope, level in perms.items() if level == "write"}
        if writes - _ELEVATED:
            out.append(f"job {name}: needs no write access, has {sorted(writes - _ELEVATED)}")
        uses_attest = any(str(s.get("uses", "")).startswith("actions/attest") for s in job.get("steps", []))
        if writes & _ELEVATED and not uses_attest:
            out.append(f"job {name}: holds {sorted(writes & _ELEVATED)} but does not attest")
        if _runs_on_self_hosted(job):
            if writes:
                out.append(f"job {name}: runs on a self-hosted runner with write permissions {sorted(writes)}")
            if "pull_request" in on:
                condition = " ".join(str(job.get("if", "")).split())
                if FORK_GUARD not in condition or LABEL_GUARD not in condition:
                    out.append(f"job {name}: a pull_request run on self-hosted runners lacks the fork or label guard")
        for step in job.get("steps", []):
            uses = step.get("uses")
            if uses and not PINNED.match(str(uses)):
                out.append(f"job {name}: action {uses} is not pinned to a major version or commit")
            if (
                str(uses or "").startswith("actions/checkout")
                and (step.get("with") or {}).get("persist-credentials") is not False
            ):
                out.append(f"job {name}: checkout must set persist-credentials: false")
            run = str(step.get("run", ""))
            if "secrets." in run:
                out.append(f"job {name}: a run script expands a secret inline (use env:)")
            if re.search(r"\bset\s+-[a-z]*x", run):
                out.append(f"job {name}: set -x would trace secrets into the log")
            for var in _secret_env(step):
                for line in run.splitlines():
                    mentioned = f"${var}" in line or f"${{{var}}}" in line
                    # Allowed: an emptiness test, or writing it to a file; anything else may print it.
                    safe = re.search(r"\[ -[zn] \"\$" + var, line) or re.search(r">\s*\"?\$", line)
                    if mentioned and not safe:
                        out.append(f"job {name}: secret variable {var} may reach the log: {line.strip()}")
    return out
