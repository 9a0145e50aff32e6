"""The serving tests' runs on a GPU host: one `qualify serve-*` process per layout, comparisons against the
reference, each kept under QUALIFY_E2E_OUT (with a file-name prefix) when that is set; the real model's host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from qualify.serve.config import VLLM_KV_CACHE_LAYOUT_ENV

ROOT = Path(__file__).resolve().parents[2]
KEEP_ENV = "QUALIFY_E2E_OUT"
REAL_MODEL_ENV = "QUALIFY_REAL_MODEL_DIR"
# The agreement runs' reference layout (FA3, the cartridge shared through vLLM's prefix cache) and the mean log-prob
# tolerance of K16/V8 against it; the small Qwen3's margin below which a greedy choice counts as a tie (random
# weights put exact BF16 ties early; the real model's runs take their own).
REFERENCE = "bf16-prefix-cached"
TIE_EPS = 0.1
LOGPROB_TOLERANCE = 0.1


def require_vllm_host() -> None:
    """Skips the test anywhere but an SM90 GPU host with vLLM."""
    import importlib.util

    import pytest
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"qualified on SM90 only; this GPU is {torch.cuda.get_device_capability()}")
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vLLM 0.26 (pip install 'cartridge-qualify[serve]')")


def require_real_model() -> str:
    """The converted SmolLM2 folder on an SM90 host with vLLM; skips the test anywhere else."""
    import importlib.util

    import pytest
    import torch

    model = os.environ.get(REAL_MODEL_ENV)
    if not model:
        pytest.skip(f"set {REAL_MODEL_ENV} to the converted SmolLM2 folder (scripts/gpu_real.sh convert)")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an SM90 GPU")
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vLLM 0.26")
    return model


def run_cli(args: list[str], what: str) -> None:
    """`python -m qualify.cli ARGS` with this checkout and its kernels on the path; fails the test on failure."""
    env = dict(os.environ)
    # A layout the caller exported must not reach a run that asks for none (a run asks with --kv-cache-layout).
    env.pop(VLLM_KV_CACHE_LAYOUT_ENV, None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "kernels"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "qualify.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, f"{what} failed:\n{(proc.stderr or proc.stdout)[-4000:]}"


def keep(name: str, text: str) -> None:
    out = os.environ.get(KEEP_ENV)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / name).write_text(text)


def generate_runs(layouts: tuple[str, ...], into: Path, extra: list[str], prefix: str = "") -> dict[str, Path]:
    """Each layout's record, generated in a fresh process with the extra command-line arguments."""
    paths = {}
    for layout in layouts:
        out = paths[layout] = into / f"{layout}.json"
        run_cli(["serve-agreement", "generate", "--layout", layout, "--out", str(out), *extra], layout)
        keep(f"{prefix}{layout}.json", out.read_text())
    return paths


def compare_runs(reference: Path, candidate: Path, *, tie_eps: float, logprob_tolerance: float | None,
                 prefix: str = "") -> dict:  # fmt: skip
    from qualify.serve.e2e import compare

    result = compare(reference, candidate, tie_eps=tie_eps, logprob_tolerance=logprob_tolerance)
    keep(f"{prefix}compare-{json.loads(candidate.read_text())['layout']}.json", json.dumps(result, indent=1))
    return result
