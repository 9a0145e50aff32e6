"""What this host can run: the capabilities a gate's `requires:` is checked against."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class HostCapabilities:
    available: frozenset[str]
    gpu_name: str | None = None
    compute_capability: tuple[int, int] | None = None
    why_missing: dict[str, str] = field(default_factory=dict)

    def missing(self, requires: Iterable[str]) -> list[str]:
        return [r for r in requires if r not in self.available]

    def skip_reason(self, requires: Iterable[str]) -> str | None:
        missing = self.missing(requires)
        if not missing:
            return None
        parts = [f"{m} ({self.why_missing.get(m, 'not available on this host')})" for m in missing]
        return "requires " + ", ".join(parts)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def detect_host() -> HostCapabilities:
    """Probe the host once per run. Importing torch is the only heavy step; no kernel is launched."""
    available = {"cpu"}
    why: dict[str, str] = {}
    gpu_name = None
    cc = None
    try:
        import torch

        if torch.cuda.is_available():
            available.add("cuda")
            gpu_name = torch.cuda.get_device_name(0)
            cc = tuple(torch.cuda.get_device_capability(0))
            if cc == (9, 0):
                available.add("sm90")
            else:
                why["sm90"] = f"GPU 0 is {gpu_name} (sm{cc[0]}{cc[1]}), the qualified envelope is SM90"
        else:
            why["cuda"] = why["sm90"] = "no CUDA GPU visible to torch"
    except ImportError:
        why["cuda"] = why["sm90"] = "torch is not installed"
    for cap, module in (("triton", "triton"), ("flashinfer", "flashinfer"), ("vllm", "vllm"), ("lm_eval", "lm_eval")):
        if _importable(module):
            available.add(cap)
        else:
            why[cap] = f"python package {module!r} is not installed"
    # The Gluon prefill compiles only with the Triton whose Gluon it is written in (cartridge_attn.gluon_host).
    if "triton" in available:
        from cartridge_attn.gluon_host import gluon_problem

        problem = gluon_problem()
        if problem is None:
            available.add("gluon")
        else:
            why["gluon"] = problem
    else:
        why["gluon"] = why["triton"]
    if shutil.which("ncu"):
        available.add("ncu")
    else:
        why["ncu"] = "Nsight Compute (ncu) is not on PATH"
    return HostCapabilities(frozenset(available), gpu_name, cc, why)
