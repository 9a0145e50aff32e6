"""Start the worker for one implementation in a fresh process (optionally under Nsight Compute)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from qualify.errors import QualifyError
from qualify.perf import ncu
from qualify.perf.spec import WorkRequest, WorkResult


def _env() -> dict[str, str]:
    # Same interpreter, same environment: the worker imports qualify and cartridge_attn from wherever the
    # parent did (the installed project; its entry points are how the parent found its gate kinds at all).
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _worker_command(request_path: Path, result_path: Path, profile: bool) -> list[str]:
    cmd = [sys.executable, "-m", "qualify.perf.worker", "--request", str(request_path), "--result", str(result_path)]
    return [*cmd, "--profile"] if profile else cmd


def _tail(text: str, n: int = 3000) -> str:
    return text[-n:].strip()


def run_worker(request: WorkRequest, *, timeout_s: float) -> WorkResult:
    """Measure `request` in a fresh Python process; QualifyError with the worker's output on failure."""
    with tempfile.TemporaryDirectory(prefix="qualify-perf-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(request.model_dump_json())
        what = f"perf worker for {request.implementation_set}/{request.implementation}"
        try:
            proc = subprocess.run(
                _worker_command(req, res, profile=False),
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=_env(),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise QualifyError(f"{what} ran past {timeout_s:.0f} s (timing.worker_timeout_s)") from exc
        if proc.returncode != 0 or not res.exists():
            raise QualifyError(f"{what} failed (exit {proc.returncode}):\n{_tail(proc.stderr or proc.stdout)}")
        return WorkResult.model_validate_json(res.read_text())


def run_profiled(request: WorkRequest, *, timeout_s: float) -> dict[str, Any]:
    """Hardware counters of one call per cell of `request`, from Nsight Compute; raises if ncu is absent."""
    tool = shutil.which("ncu")
    if tool is None:
        raise QualifyError("Nsight Compute (ncu) is not on PATH")
    plan = ncu.plan_metrics(_available_metrics(tool))
    with tempfile.TemporaryDirectory(prefix="qualify-ncu-") as tmp:
        req, res, log = Path(tmp) / "request.json", Path(tmp) / "result.json", Path(tmp) / "ncu.csv"
        req.write_text(request.model_dump_json())
        cmd = ncu.profile_command(tool, log, _worker_command(req, res, profile=True), plan.metrics)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=_env(), check=False)
        except subprocess.TimeoutExpired as exc:
            raise QualifyError(f"ncu profile of {request.implementation} ran past {timeout_s:.0f} s") from exc
        text = log.read_text() if log.exists() else ""
        if proc.returncode != 0:
            raise QualifyError(f"ncu exit {proc.returncode}:\n{_tail(proc.stderr or proc.stdout or text)}")
        shape = request.shape_set()
        names = [ncu.range_name(m, b, s) for s in shape.suffixes for b in shape.batches for m in request.metrics]
        return {"metrics": plan.metrics, "missing": list(plan.missing), "by_cell": ncu.parse_csv(text, names, plan)}


def _available_metrics(tool: str) -> set[str] | None:
    """The base metric names this ncu offers on this GPU; None when the query fails (then the core counters)."""
    try:
        proc = subprocess.run(ncu.query_command(tool), capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return None
    bases = ncu.available_bases(proc.stdout) if proc.returncode == 0 else set()
    return bases or None
