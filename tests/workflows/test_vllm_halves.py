"""`scripts/vllm_halves.sh`: vLLM's staged parts split in halves here and rejoined on the host give the pieces that
`.vllm/setup.sh` checks against its MANIFEST, byte for byte; a second half before its first is refused."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vllm_halves.sh"


def _run(cwd: Path, *args: str, stage: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VLLM_STAGE": str(stage)}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


@pytest.fixture
def packed(tmp_path: Path) -> Path:
    """A project root whose .vllm holds three parts of random bytes (odd sizes) and their MANIFEST."""
    rng = random.Random()
    root = tmp_path / "root"
    manifest = []
    for n, piece in ((1, "piece00"), (2, "piece01"), (3, "piece02")):
        part = root / ".vllm" / str(n)
        part.mkdir(parents=True)
        (part / piece).write_bytes(rng.randbytes(rng.randrange(1001, 5001)))
        files = [piece]
        if n == 1:
            (part / "sizes").write_text("12 34\n")
            files.append("sizes")
        manifest += [f"{hashlib.sha256((part / f).read_bytes()).hexdigest()}  {n}/{f}" for f in files]
    (root / ".vllm" / "MANIFEST").write_text("\n".join(manifest) + "\n")
    return root


def test_halves_rejoin_to_the_manifests_pieces(packed: Path, tmp_path: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("needs sha256sum")
    assert _run(packed, "split", stage=tmp_path / "unused").returncode == 0
    stage = tmp_path / "stage"
    for half in ("1a", "1b", "2a", "2b", "3a", "3b"):
        # Each call sees only its own half, as a device call carries only that folder.
        call = tmp_path / f"call-{half}"
        (call / ".vllm" / "h").mkdir(parents=True)
        shutil.copytree(packed / ".vllm" / "h" / half, call / ".vllm" / "h" / half)
        shutil.copy(packed / ".vllm" / "MANIFEST", call / ".vllm" / "MANIFEST")
        done = _run(call, "stage", half, stage=stage)
        assert done.returncode == 0, done.stdout + done.stderr
    check = subprocess.run(["sha256sum", "-c", "MANIFEST"], cwd=stage, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout


def test_a_second_half_before_its_first_and_an_unknown_half_are_refused(packed: Path, tmp_path: Path) -> None:
    assert _run(packed, "split", stage=tmp_path / "unused").returncode == 0
    early = _run(packed, "stage", "2b", stage=tmp_path / "stage")
    assert early.returncode == 1 and "stage 2a first" in early.stdout
    unknown = _run(packed, "stage", "4a", stage=tmp_path / "stage")
    assert unknown.returncode == 2 and "not one of" in unknown.stdout
