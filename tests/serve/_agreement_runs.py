"""The agreement tests' runs: one `qualify serve-agreement generate` process per layout, and comparisons
against the reference, each kept under QUALIFY_E2E_OUT (with a file-name prefix) when that is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEEP_ENV = "QUALIFY_E2E_OUT"


def _keep(name: str, text: str) -> None:
    keep = os.environ.get(KEEP_ENV)
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / name).write_text(text)


def generate_runs(layouts: tuple[str, ...], into: Path, extra: list[str], prefix: str = "") -> dict[str, Path]:
    """Each layout's record, generated in a fresh process with the extra command-line arguments."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "kernels"), env.get("PYTHONPATH", "")])
    paths = {}
    for layout in layouts:
        out = paths[layout] = into / f"{layout}.json"
        cmd = [sys.executable, "-m", "qualify.cli", "serve-agreement", "generate", "--layout", layout,
               "--out", str(out), *extra]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
        assert proc.returncode == 0, f"{layout} failed:\n{(proc.stderr or proc.stdout)[-4000:]}"
        _keep(f"{prefix}{layout}.json", out.read_text())
    return paths


def compare_runs(reference: Path, candidate: Path, *, tie_eps: float, logprob_tolerance: float | None,
                 prefix: str = "") -> dict:  # fmt: skip
    from qualify.serve.e2e import compare

    result = compare(reference, candidate, tie_eps=tie_eps, logprob_tolerance=logprob_tolerance)
    _keep(f"{prefix}compare-{json.loads(candidate.read_text())['layout']}.json", json.dumps(result, indent=1))
    return result
