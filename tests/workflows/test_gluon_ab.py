"""`scripts/gluon_ab.sh` on bad input and on a failing patched kernel, without a GPU: a missing or non-applying
patch is refused in one line (exit 2) before anything is copied, and a patched kernel whose GPU tests fail ends the
call with every file the patch touched (the kernel and its host side) put back, and any it added removed (exit 1),
its A/B files still packed for the record."""

from __future__ import annotations

import os
import random
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gluon_ab.sh"
KERNEL = Path("kernels/cartridge_attn/_gluon_prefill.py")
HOST = Path("kernels/cartridge_attn/gluon_host.py")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A project root under git whose Gluon prefill and its host side are fresh random texts, and a bin folder of
    stand-ins for the host's tools: `python3` fails as a failing test run would, `nvidia-smi` prints nothing."""
    root = tmp_path / "root"
    (root / KERNEL).parent.mkdir(parents=True)
    rng = random.Random()
    for path in (KERNEL, HOST):
        (root / path).write_text("".join(f"line {rng.randrange(10**9)}\n" for _ in range(40)))
    _git(root, "init", "-q")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "tree")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("python3", "exit 1"), ("nvidia-smi", "exit 0")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return root


def _patch_of(root: Path, edit: str, name: str, files: tuple[Path, ...] = (KERNEL,)) -> Path:
    """A git-format patch that replaces line 3 of each of `files` with `edit`, the tree left as it was."""
    before = {f: (root / f).read_text() for f in files}
    for f, text in before.items():
        lines = text.splitlines(keepends=True)
        lines[2] = edit + "\n"
        (root / f).write_text("".join(lines))
    diff = subprocess.run(["git", "diff"], cwd=root, check=True, capture_output=True, text=True).stdout
    for f, text in before.items():
        (root / f).write_text(text)
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
    assert run.stderr.strip().splitlines() == [f"gluon_ab.sh: {patch} does not apply to this tree"]
    assert (tree / KERNEL).read_bytes() == before
    assert not (tree.parent / "out").exists() and not (tree.parent / "ab-out").exists()


@pytest.mark.parametrize("files", [(KERNEL,), (KERNEL, HOST)], ids=["kernel", "kernel-and-host"])
def test_a_failing_patched_kernel_ends_the_call_with_the_trees_files_back(tree: Path, files: tuple[Path, ...]) -> None:
    before = {f: (tree / f).read_bytes() for f in (KERNEL, HOST)}
    patch = _patch_of(tree, f"patched {random.randrange(10**9)}", "good.patch", files)
    run = _run(tree, patch)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "pytest exit 1" in run.stdout
    assert "== bench" not in run.stdout  # nothing timed on a kernel that failed its tests
    assert {f: (tree / f).read_bytes() for f in (KERNEL, HOST)} == before
    with tarfile.open(tree.parent / "out" / "ab.tar.gz") as packed:
        names = {Path(n).name for n in packed.getnames()}
        new = packed.extractfile(next(m for m in packed.getmembers() if m.name.endswith("/new.py")))
        assert new is not None and b"patched" in new.read()
        for f in files:  # every touched file, both sides
            for side in ("new", "base"):
                copy = packed.extractfile(f"ab-out/{side}/{f}")
                assert copy is not None and (b"patched" in copy.read()) == (side == "new")
    assert {"base.py", "new.py", "tests.log"} <= names


def test_a_file_the_patch_adds_is_gone_again_when_the_patched_tree_fails(tree: Path) -> None:
    before = (tree / KERNEL).read_bytes()
    added = Path("kernels/cartridge_attn/_new_part.py")
    edit = f"patched {random.randrange(10**9)}"
    patch = _patch_of(tree, edit, "adds.patch")
    new_file = f"diff --git a/{added} b/{added}\nnew file mode 100644\n--- /dev/null\n+++ b/{added}\n"
    patch.write_text(patch.read_text() + new_file + f"@@ -0,0 +1 @@\n+{edit}\n")
    run = _run(tree, patch)
    assert run.returncode == 1, run.stdout + run.stderr
    assert (tree / KERNEL).read_bytes() == before
    assert not (tree / added).exists()
    with tarfile.open(tree.parent / "out" / "ab.tar.gz") as packed:
        copy = packed.extractfile(f"ab-out/new/{added}")
        assert copy is not None and edit.encode() in copy.read()
        assert f"ab-out/base/{added}" not in packed.getnames()
