"""Security rules for the workflows, checked on the parsed YAML and on the raw text (for pin comments), so
a test can also feed them bad variants. The threat model is the README's "Security" section:

* nothing runs with the base repository's secrets on pull-request code (`pull_request_target`, `workflow_run`);
* a job that can run pull-request code holds no secret, no OIDC token and no write permission, and no job that
  does hold one depends on it (`needs`), so pull-request code never reaches the signing identity;
* on the self-hosted runners: no secret, no write permission, no Actions cache (poisoning); a pull-request job
  needs the label and same-repository guards, the approval environment and the labelled head commit; any
  other job needs the release environment;
* every `uses:` is pinned to a full commit SHA with the release tag as a comment.
"""

from __future__ import annotations

import re
from typing import Any

FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"
LABEL_GUARD = "github.event.label.name == 'gpu-qualify'"
PR_ONLY = "github.event_name == 'pull_request'"
NO_PR = "github.event_name != 'pull_request'"
PR_HEAD_SHA = "${{ github.event.pull_request.head.sha }}"
PR_APPROVAL_ENVIRONMENT = "gpu-pr"
RELEASE_ENVIRONMENT = "gpu-release"
GPU_LABELS = ["self-hosted", "linux", "x64", "gpu", "sm90"]
# `uses: owner/repo[/path]@<40 hex>  # vX[.Y[.Z]]`, nothing else on the line.
PINNED_LINE = re.compile(r"^\s*(-\s+)?uses:\s*[\w.-]+/[\w./-]+@[0-9a-f]{40}\s+#\s*v\d+(\.\d+){0,2}\s*$")
_USES_LINE = re.compile(r"^\s*(-\s+)?uses:\s*(\S+)")
_OIDC = {"id-token", "attestations"}


def triggers(workflow: dict[str, Any]) -> dict[str, Any]:
    # PyYAML reads the bare key `on` as the boolean True (YAML 1.1).
    on = workflow.get("on", workflow.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return dict(on or {})


def _condition(job: dict[str, Any]) -> str:
    return " ".join(str(job.get("if", "")).split())


def _runs_on_self_hosted(job: dict[str, Any]) -> bool:
    runs_on = job.get("runs-on")
    labels = runs_on if isinstance(runs_on, list) else [runs_on]
    return "self-hosted" in labels


def runs_pull_request_code(workflow: dict[str, Any], job: dict[str, Any]) -> bool:
    """Whether the job can start on a pull_request event (and so run, or consume, the pull request's code).

    Only an explicit `github.event_name != 'pull_request'` conjunct in the job's `if` rules it out.
    """
    if "pull_request" not in triggers(workflow):
        return False
    condition = _condition(job)
    return not (NO_PR in condition and " || " not in condition)


def _environment(job: dict[str, Any]) -> str | None:
    env = job.get("environment")
    return env.get("name") if isinstance(env, dict) else env


def _secret_env(step: dict[str, Any]) -> list[str]:
    return [name for name, value in (step.get("env") or {}).items() if "secrets." in str(value)]


def _mentions_secret(value: Any) -> bool:
    return bool(re.search(r"secrets\.(?!GITHUB_TOKEN\b)", str(value)))


def unpinned_uses(text: str) -> list[str]:
    """Every `uses:` line of a workflow's text that is not `@<full SHA> # <tag>`."""
    return [
        f"line {n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if _USES_LINE.match(line)
        and not _USES_LINE.match(line).group(2).startswith("./")
        and not PINNED_LINE.match(line)
    ]


def _needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _upstream(jobs: dict[str, Any], name: str) -> set[str]:
    """Every job `name` depends on, directly or through others (a merge job between a PR job and attest counts)."""
    seen: set[str] = set()
    todo = _needs(jobs.get(name) or {})
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo += _needs(jobs.get(n) or {})
    return seen


def problems(workflow: dict[str, Any], text: str | None = None) -> list[str]:
    """Every rule the workflow breaks, as readable lines; empty means it passes. `text` adds the pin check."""
    out = [f"action not pinned to a full commit SHA with its tag as a comment: {u}" for u in unpinned_uses(text or "")]
    on = triggers(workflow)
    if "pull_request_target" in on or "workflow_run" in on:
        out.append("uses pull_request_target/workflow_run, which run with secrets on untrusted code")
    top = workflow.get("permissions")
    if top not in ({}, {"contents": "read"}):
        out.append(f"top-level permissions must be {{}} or contents: read, not {top!r}")
    jobs = workflow.get("jobs") or {}
    pr_jobs = {name for name, job in jobs.items() if runs_pull_request_code(workflow, job)}
    for name, job in jobs.items():
        perms = job.get("permissions", top)
        if not isinstance(perms, dict):
            out.append(f"job {name}: permissions must be an explicit mapping, not {perms!r}")
            perms = {}
        writes = {scope for scope, level in perms.items() if level == "write"}
        steps = job.get("steps", [])
        holds_secret = _mentions_secret(job.get("env")) or any(_mentions_secret(s) for s in steps)
        if writes - _OIDC:
            out.append(f"job {name}: needs no write access, has {sorted(writes - _OIDC)}")
        uses_attest = any(str(s.get("uses", "")).startswith("actions/attest") for s in steps)
        if writes & _OIDC and not uses_attest:
            out.append(f"job {name}: holds {sorted(writes & _OIDC)} but does not attest")
        needs = sorted(_upstream(jobs, name))  # what this job consumes, also through the jobs between
        if name in pr_jobs and (holds_secret or writes):
            out.append(f"job {name}: can run pull-request code and holds a secret or write/OIDC permission")
        if (holds_secret or writes & _OIDC) and set(needs) & pr_jobs:
            out.append(
                f"job {name}: signs or holds a secret but depends on pull-request job(s) {sorted(set(needs) & pr_jobs)}"
            )
        if _runs_on_self_hosted(job):
            if writes:
                out.append(f"job {name}: runs on a self-hosted runner with write permissions {sorted(writes)}")
            if holds_secret:
                out.append(f"job {name}: runs on a self-hosted runner and references a secret")
            if any(str(s.get("uses", "")).startswith("actions/cache") for s in steps):
                out.append(f"job {name}: restores an Actions cache on a self-hosted runner (cache poisoning)")
            if name in pr_jobs:
                condition = _condition(job)
                if any(g not in condition for g in (PR_ONLY, FORK_GUARD, LABEL_GUARD)) or " || " in condition:
                    out.append(f"job {name}: a pull_request run on self-hosted runners lacks the fork or label guard")
                if _environment(job) != PR_APPROVAL_ENVIRONMENT:
                    out.append(f"job {name}: a pull_request job on self-hosted runners needs the approval environment")
                for s in steps:
                    checkout = str(s.get("uses", "")).startswith("actions/checkout")
                    if checkout and (s.get("with") or {}).get("ref") != PR_HEAD_SHA:
                        out.append(f"job {name}: checkout must pin the labelled commit ({PR_HEAD_SHA})")
            elif _environment(job) != RELEASE_ENVIRONMENT:
                out.append(
                    f"job {name}: a release job on self-hosted runners needs the {RELEASE_ENVIRONMENT} environment"
                )
        for step in steps:
            uses = step.get("uses")
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
