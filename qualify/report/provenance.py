"""Where and with what a qualification run happened: code, package versions, hardware, CI context.

Every probe tolerates its tool being absent (no git, no GPU, no nvidia-smi) and records "unknown" or
null instead: a report must still be written on a bare machine. Environment variables and command
line arguments are filtered so that no credential can end up in a signed, widely shared report.
"""

from __future__ import annotations

import ast
import csv
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

import qualify
from qualify.secret_names import is_secret_name

# report key -> distribution names to try, first installed wins. Read from metadata only: importing
# vllm or flashinfer just to learn their version would cost seconds and could touch the GPU.
_DISTRIBUTIONS: Mapping[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "triton": ("triton", "pytorch-triton"),
    "transformers": ("transformers",),
    "flashinfer": ("flashinfer-python",),
    "vllm": ("vllm",),
    "lm-eval": ("lm_eval", "lm-eval"),
    "gguf": ("gguf",),
    "cryptography": ("cryptography",),
    "pydantic": ("pydantic",),
    "cartridge-qualify": ("cartridge-qualify",),
}

# A package unpacked onto the path without its distribution metadata (the SM90 host's FlashInfer) still names its
# version, and its commit, in a module of its own: report key -> (package, file), read as text, never imported.
_BUILD_META: Mapping[str, tuple[str, str]] = {"flashinfer": ("flashinfer", "_build_meta.py")}

_ENV_ALLOWLIST = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "GITHUB_RUN_ID",
        "GITHUB_RUN_ATTEMPT",
        "GITHUB_SHA",
        "GITHUB_REF",
        "GITHUB_REPOSITORY",
        "GITHUB_WORKFLOW",
        "GITHUB_ACTOR",
        "RUNNER_NAME",
        "CI",
        "TRITON_INTERPRET",
    }
)
_ENV_ALLOWED_PREFIX = "QUALIFY_"
# A name that looks secret (qualify.secret_names: KEY, TOKEN, PASS, AUTH, ...) is dropped even when
# allowlisted: QUALIFY_SIGNING_KEY must never be copied into a report, and a future allowlist entry
# must not be able to let one through.
_SIGNING_KEY_ENV = "QUALIFY_SIGNING_KEY"
# PEM armour in a value means key material, whatever the variable is called.
_KEY_MATERIAL_MARKER = "-----BEGIN"

_NVIDIA_SMI_FIELDS = ("name", "driver_version", "memory.total", "clocks.sm", "clocks.mem", "clocks.max.sm")
_TOOL_TIMEOUT_S = 20
_REDACTED = "<redacted>"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GitInfo(_Model):
    commit: str  # "unknown" outside a repository or without git
    dirty: bool | Literal["unknown"]


class CudaDevice(_Model):
    index: int  # CUDA ordinal: after CUDA_VISIBLE_DEVICES, not necessarily nvidia-smi's order
    name: str
    compute_capability: str
    total_memory_bytes: int


class CudaInfo(_Model):
    available: bool
    cuda_version: str | None  # the CUDA torch was built against (torch.version.cuda)
    devices: list[CudaDevice]
    error: str | None = None


class NvidiaSmiGpu(_Model):
    # Kept as printed (with units): this is a record for people, not an input to arithmetic.
    name: str
    driver_version: str
    memory_total: str
    clocks_sm: str
    clocks_mem: str
    clocks_max_sm: str


class NvidiaSmi(_Model):
    # Separate from CudaInfo: nvidia-smi lists every GPU in PCI order, CUDA only the visible ones in
    # its own order, so pairing them by index would be wrong exactly when it matters.
    gpus: list[NvidiaSmiGpu]
    error: str | None = None


class CpuInfo(_Model):
    model: str
    logical_cores: int | None
    usable_cores: int | None  # what this process may run on (affinity, cgroup cpusets)


class Provenance(_Model):
    command_line: list[str]
    started_at: str
    finished_at: str
    duration_s: float
    git: GitInfo
    versions: dict[str, str | None]
    python: str
    cuda: CudaInfo
    nvidia_smi: NvidiaSmi | None  # None: nvidia-smi is not installed
    cpu: CpuInfo
    os: str
    hostname: str
    environment: dict[str, str]


def package_version(*dist_names: str) -> str | None:
    """Installed version of the first of `dist_names` that is installed, else None."""
    for name in dist_names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def build_meta(package: str, filename: str) -> dict[str, str]:
    """The string constants a top-level package's `filename` assigns at its top level (``__version__ = "..."``,
    annotated or not), read without importing the package; empty where the package or the file is absent or the
    file does not parse."""
    if "." in package:  # finding a submodule would import its parents
        return {}
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    for folder in spec.submodule_search_locations:
        try:
            tree = ast.parse((Path(folder) / filename).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        found: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.update({t.id: value.value for t in targets if isinstance(t, ast.Name)})
        return found
    return {}


def _versions() -> dict[str, str | None]:
    versions = {key: package_version(*names) for key, names in _DISTRIBUTIONS.items()}
    # Run from a source checkout the package has no metadata, but the code running is still ours.
    versions["cartridge-qualify"] = versions["cartridge-qualify"] or qualify.__version__
    for key, (package, filename) in _BUILD_META.items():
        meta = build_meta(package, filename)
        versions[key] = versions[key] or meta.get("__version__")
        # The SM90 host's build names it __git_commit__; FlashInfer's own build backend writes __git_version__.
        versions[f"{key}-commit"] = meta.get("__git_commit__") or meta.get("__git_version__")
    return versions


def _run(argv: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str] | None:
    """Run a probe command; None if it cannot be started or hangs."""
    # No optional locks: `git status` would otherwise refresh (write) the index of a checkout that
    # other processes may be using at the same time.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        return subprocess.run(
            list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _git(repo_root: Path) -> GitInfo:
    unknown = GitInfo(commit="unknown", dirty="unknown")
    git = shutil.which("git")
    if git is None or not repo_root.is_dir():
        return unknown
    head = _run([git, "rev-parse", "--verify", "HEAD"], cwd=repo_root)
    if head is None or head.returncode != 0 or not head.stdout.strip():
        return unknown
    # Untracked (not ignored) files count as dirty: a new test module changes what a run executes.
    status = _run([git, "status", "--porcelain"], cwd=repo_root)
    dirty: bool | Literal["unknown"] = "unknown"
    if status is not None and status.returncode == 0:
        dirty = bool(status.stdout.strip())
    return GitInfo(commit=head.stdout.strip(), dirty=dirty)


def _cuda() -> CudaInfo:
    try:
        import torch  # a base dependency, imported here only so importing this module stays cheap

        cuda_version = torch.version.cuda
        if not torch.cuda.is_available():
            return CudaInfo(available=False, cuda_version=cuda_version, devices=[])
        devices = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append(
                CudaDevice(
                    index=index,
                    name=props.name,
                    compute_capability=f"{props.major}.{props.minor}",
                    total_memory_bytes=int(props.total_memory),
                )
            )
        return CudaInfo(available=True, cuda_version=cuda_version, devices=devices)
    except Exception as e:  # a broken driver must cost the report a field, not the whole run
        return CudaInfo(available=False, cuda_version=None, devices=[], error=f"{type(e).__name__}: {e}")


def _nvidia_smi() -> NvidiaSmi | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    result = _run([exe, f"--query-gpu={','.join(_NVIDIA_SMI_FIELDS)}", "--format=csv,noheader"])
    if result is None:
        return NvidiaSmi(gpus=[], error="nvidia-smi could not be run or timed out")
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()
        return NvidiaSmi(gpus=[], error=message[0] if message else f"exit status {result.returncode}")
    gpus = []
    for row in csv.reader(result.stdout.splitlines(), skipinitialspace=True):
        if len(row) != len(_NVIDIA_SMI_FIELDS):
            continue
        gpus.append(NvidiaSmiGpu(**dict(zip(NvidiaSmiGpu.model_fields, row, strict=True))))
    return NvidiaSmi(gpus=gpus)


def _cpu() -> CpuInfo:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                    break
    except OSError:
        pass  # not Linux: fall back to platform below
    model = model or platform.processor() or platform.machine() or "unknown"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return CpuInfo(model=model, logical_cores=os.cpu_count(), usable_cores=usable)


@dataclass(frozen=True)
class SigningSecrets:
    """Values of the signing configuration that must not reach a report.

    Paths match whole values only (a one-letter key path must not redact every value holding that
    letter); lines of the key file's text match anywhere in a value.
    """

    paths: frozenset[str] = frozenset()
    key_lines: tuple[str, ...] = ()

    def held_by(self, value: str) -> bool:
        return _KEY_MATERIAL_MARKER in value or value in self.paths or any(line in value for line in self.key_lines)

    @classmethod
    def of(cls, environ: Mapping[str, str], sign_key: str | os.PathLike[str] | None = None) -> SigningSecrets:
        """The key path given to this run and `QUALIFY_SIGNING_KEY`'s, and the PEM body lines of those files."""
        paths = {str(p) for p in (sign_key, environ.get(_SIGNING_KEY_ENV)) if p}
        lines: list[str] = []
        for p in paths:
            try:
                text = Path(p).read_text(encoding="utf-8", errors="replace") if Path(p).is_file() else ""
            except OSError:
                continue
            # Armour lines are public boilerplate; the base64 body lines are the secret.
            lines += [ln.strip() for ln in text.splitlines() if len(ln.strip()) >= 16 and "-----" not in ln]
        return cls(frozenset(paths), tuple(lines))


def filter_environment(environ: Mapping[str, str], secrets: SigningSecrets | None = None) -> dict[str, str]:
    """The allowlisted variables of `environ`, minus any whose name looks like it holds a secret and any
    whose value holds PEM key material or a value of the signing configuration (`secrets`)."""
    secrets = secrets or SigningSecrets()
    return {
        name: value
        for name, value in sorted(environ.items())
        if (name in _ENV_ALLOWLIST or name.startswith(_ENV_ALLOWED_PREFIX))
        and not is_secret_name(name)
        and not secrets.held_by(value)
    }


def redact_argv(argv: Sequence[str], secrets: SigningSecrets | None = None) -> list[str]:
    """`argv` with the values of secret-looking options (`--hf-token X`, `--api-key=X`) redacted, and any
    argument that holds a value of the signing configuration (the key path given positionally, say)."""
    secrets = secrets or SigningSecrets()
    out: list[str] = []
    redact_next = False
    for arg in argv:
        if redact_next:
            out.append(_REDACTED)
            redact_next = False
        elif arg.startswith("-") and is_secret_name(arg.partition("=")[0]):
            if "=" in arg:
                out.append(f"{arg.partition('=')[0]}={_REDACTED}")
            else:
                out.append(arg)
                redact_next = True
        elif secrets.held_by(arg):
            out.append(_REDACTED)
        else:
            out.append(arg)
    return out


def _utc_iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        # A naive time is local time on some machine we cannot name; guessing would mislabel it.
        raise ValueError("provenance times must be timezone-aware (e.g. datetime.now(UTC))")
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def collect_provenance(
    argv: Sequence[str],
    repo_root: Path,
    started_at: datetime,
    finished_at: datetime,
    *,
    environ: Mapping[str, str] | None = None,
    sign_key: str | os.PathLike[str] | None = None,
) -> Provenance:
    """Describe the run; `environ` defaults to the process environment. Never fails for a missing tool.

    `sign_key` is the private key file signing this run: neither its path (nor `QUALIFY_SIGNING_KEY`'s)
    nor any line of its contents is recorded, under whatever name or argument it appears.
    """
    environ = os.environ if environ is None else environ
    secrets = SigningSecrets.of(environ, sign_key)
    return Provenance(
        command_line=redact_argv(argv, secrets),
        started_at=_utc_iso(started_at),
        finished_at=_utc_iso(finished_at),
        duration_s=round((finished_at - started_at).total_seconds(), 3),
        git=_git(Path(repo_root)),
        versions=_versions(),
        python=platform.python_version(),
        cuda=_cuda(),
        nvidia_smi=_nvidia_smi(),
        cpu=_cpu(),
        os=platform.platform(),
        hostname=socket.gethostname(),
        environment=filter_environment(environ, secrets),
    )
