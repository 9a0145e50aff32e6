"""`scripts/gpu_lib.sh`'s `vllm_if_staged`, which the kernel and perf calls use to add staged vLLM for the FA3
baseline: a no-op without the staged setup, and vLLM's site put after FlashInfer's on the path, with its setup run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _run(tmp_path: Path, setup: str | None) -> str:
    if setup is not None:
        (tmp_path / ".vllm").mkdir()
        (tmp_path / ".vllm" / "setup.sh").write_text(setup)
    lib = ROOT / "scripts" / "gpu_lib.sh"
    script = f"source {lib}; PYTHONPATH=/proj:/tmp/gpu-site; vllm_if_staged; echo $?:$PYTHONPATH"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def test_without_staged_vllm_nothing_changes(tmp_path: Path) -> None:
    assert _run(tmp_path, None) == "0:/proj:/tmp/gpu-site"


def test_staged_vllm_comes_after_flashinfer(tmp_path: Path) -> None:
    # As .vllm/setup.sh does: vLLM's site first on the path.
    setup = 'export PYTHONPATH="/tmp/vllm-site${PYTHONPATH:+:$PYTHONPATH}" VLLM_MARK=1\n'
    assert _run(tmp_path, setup) == "0:/proj:/tmp/gpu-site:/tmp/vllm-site"


def test_a_failed_setup_says_so_and_fails(tmp_path: Path) -> None:
    said, status = _run(tmp_path, "return 1\n").splitlines()
    assert "vLLM not set up" in said and status == "1:/proj:/tmp/gpu-site"


def _jobs(tmp_path: Path, mib: str | None, jobs: str | None = None) -> str:
    # A stand-in nvidia-smi on the path reports the GPU's memory (MiB), as the real one does for the query.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '%s\\n' '{mib}'\n" if mib is not None else "#!/bin/sh\nexit 9\n")
    smi.chmod(0o755)
    lib = ROOT / "scripts" / "gpu_lib.sh"
    env = f"PATH={bin_dir}:/usr/bin:/bin " + (f"JOBS={jobs} " if jobs else "")
    script = f"set -uo pipefail; source {lib}; {env}mutant_jobs"  # as the host scripts run it
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def test_mutants_at_once_follow_the_gpus_memory(tmp_path: Path) -> None:
    assert _jobs(tmp_path, "143771") == "8"  # an H200
    assert _jobs(tmp_path, "81559") == "4"  # an H100: eight beside the numerics run ran an item out of memory
    assert _jobs(tmp_path, None) == "4"  # no answer: the smaller
    assert _jobs(tmp_path, "[N/A]") == "4" and _jobs(tmp_path, "") == "4"
    assert _jobs(tmp_path, " 143771") == "8"
    assert _jobs(tmp_path, "143771\n81559") == "8"  # two GPUs: the first one's
    assert _jobs(tmp_path, "81559", jobs="6") == "6"
