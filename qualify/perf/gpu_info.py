"""GPU facts for the report: clocks through nvidia-smi (read only, never changed), name and versions."""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess
from typing import Any

CLOCK_FIELDS = ("index", "name", "pci.bus_id", "clocks.sm", "clocks.mem", "clocks.max.sm")


def parse_clock_csv(text: str) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=<CLOCK_FIELDS> --format=csv,noheader,nounits`; MHz as ints."""
    rows = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(CLOCK_FIELDS):
            continue
        row: dict[str, Any] = {}
        for key, value in zip(CLOCK_FIELDS, values, strict=True):
            row[key] = int(value) if key.startswith("clocks.") and value.isdigit() else value
        rows.append(row)
    return rows


def read_clocks() -> dict[str, Any]:
    """Current SM/memory clocks and the SM maximum of every visible GPU, or why they could not be read."""
    if shutil.which("nvidia-smi") is None:
        return {"error": "nvidia-smi not on PATH"}
    try:
        proc = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(CLOCK_FIELDS)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"nvidia-smi failed: {exc}"}
    if proc.returncode != 0:
        return {"error": f"nvidia-smi exit {proc.returncode}: {proc.stderr.strip()[:200]}"}
    return {"gpus": parse_clock_csv(proc.stdout)}


def versions() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    for module in ("triton", "flashinfer"):
        try:
            out[module] = __import__(module).__version__
        except Exception as exc:  # absent or broken: the report says which
            out[module] = f"unavailable ({type(exc).__name__})"
    try:  # from its metadata: importing vLLM takes seconds, and only the FA3 baseline uses it here
        out["vllm"] = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        out["vllm"] = "unavailable (not installed)"
    return out


def device_facts() -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(0)
    return {
        "name": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 1024**3, 1),
    }
