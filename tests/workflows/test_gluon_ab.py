"""`scripts/gluon_ab.sh` on bad input and on a failing patched kernel, without a GPU: a missing or non-applying
patch is refused in one line (exit 2) before anything is copied, and a patched kernel whose GPU tests fail ends the
call with the tree's kernel put back (exit 1), its A/B files still packed for the record."""

from __future__ import annotations

import os
import random
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gluon_ab.sh"
KERNEL = Path("kernels/cartridge_attn/_gluon_prefill.py")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A project root under git whose Gluon prefill is a fresh random text, and a bin folder of stand-ins for the
    host's tools: `python3` fails as a failing test run would, `nvidia-smi` prints nothing."""
    root = tmp_path / "root"
    (root / KERNEL).parent.mkdir(parents=True)
    rng = random.Random()
    (root / KERNEL).write_text("".join(f"line {rng.randrange(10**9)}\n" for _ in range(40)))
    _git(root, "init", "-q")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "tree")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("python3", "exit 1"), ("nvidia-smi", "exit 0")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return root


def _patch_of(root: Path, edit: str, name: str) -> Path:
    """A git-format patch that replaces line 3 of the kernel with `edit`, the tree left as it was."""
    kernel = root / KERNEL
    before = kernel.read_text()
    lines = before.splitlines(keepends=True)
    lines[2] = edit + "\n"
    kernel.write_text("".join(lines))
    diff = subprocess.run(["git", "diff"], cwd=root, check=True, capture_output=True, text=True).stdout
    kernel.write_text(before)
    out = root.parent / name
    out.write_text(diff)
    return out


def _run(root: Path, patch: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PATCH"}
    env["PATH"] = f"{root.parent / 'bin'}{os.pathsep}{env['PATH']}"
    env["OUT"] = str(root.parent / "out")
    env["AB_DIR"] = str(root.parent / "ab-out")
    if patch is not None:
        env["PATCH"] = str(patch)
    return subprocess.run(["bash", str(SCRIPT)], cwd=root, env=env, capture_output=True, text=True, check=False)


def test_no_patch_is_refused_in_one_line(tree: Path) -> None:
    before = (tree / KERNEL).read_bytes()
    run = _run(tree, None)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == ["gluon_ab.sh: set PATCH to the change's patch file (git apply format)"]
    assert (tree / KERNEL).read_bytes() == before
    assert not (tree.parent / "out").exists()


@pytest.mark.parametrize("kind", ["stale", "missing"])
def test_a_patch_that_does_not_apply_leaves_the_tree_alone(tree: Path, kind: str) -> None:
    if kind == "stale":
        patch = _patch_of(tree, "edited", "stale.patch")
        kernel = tree / KERNEL
        lines = kernel.read_text().splitlines(keepends=True)
        lines[2] = "moved on\n"  # the line the patch edits has changed since it was made
        kernel.write_text("".join(lines))
    else:
        patch = tree.parent / "no-such.patch"
    before = (tree / KERNEL).read_bytes()
    run = _run(tree, patch)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [f"gluon_ab.sh: {patch} does not apply to {KERNEL} here"]
    assert (tree / KERNEL).read_bytes() == before
    assert not (tree.parent / "out").exists() and not (tree.parent / "ab-out").exists()


def test_a_failing_patched_kernel_ends_the_call_with_the_trees_kernel_back(tree: Path) -> None:
    before = (tree / KERNEL).read_bytes()
    patch = _patch_of(tree, f"patched {random.randrange(10**9)}", "good.patch")
    run = _run(tree, patch)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "pytest exit 1" in run.stdout
    assert "== bench" not in run.stdout  # nothing timed on a kernel that failed its tests
    assert (tree / KERNEL).read_bytes() == before
    with tarfile.open(tree.parent / "out" / "ab.tar.gz") as packed:
        names = {Path(n).name for n in packed.getnames()}
        new = packed.extractfile(next(m for m in packed.getmembers() if m.name.endswith("new.py")))
        assert new is not None and b"patched" in new.read()
    assert {"base.py", "new.py", "tests.log"} <= names
