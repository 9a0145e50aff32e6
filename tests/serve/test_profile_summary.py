"""scripts/profile_step.py's table over recorded profiles (CPU: the profiling itself needs vLLM on a GPU)."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "profile_step.py"


def _load():
    spec = importlib.util.spec_from_file_location("profile_step", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _profile(layout: str, batch: int, gen: int, rng: random.Random) -> dict:
    return {
        "layout": layout,
        "batch": batch,
        "gen": gen,
        "unprofiled_ttft_p50_ms": rng.uniform(5, 200),
        "unprofiled_decode_step_ms": None if gen == 1 else rng.uniform(5, 20),
        "gpu_share_of_wall": rng.uniform(0.1, 1.0),
        "kernel_launches_per_token": rng.uniform(100, 2000),
        "attention_us_per_layer_per_step": rng.uniform(1, 100),
        "attention_host_us_per_layer_per_step": rng.uniform(1, 100),
    }


def test_table_has_one_row_per_profile_decode_before_prefill_and_batch_ascending() -> None:
    rng = random.Random()
    mod = _load()
    points = [(lay, b, g) for lay in ("shared-k16v8", "bf16-prefix-cached") for b in (64, 1, 16) for g in (1, 32)]
    rng.shuffle(points)
    lines = mod.summary_table([_profile(*p, rng) for p in points]).splitlines()
    assert len(lines) == 2 + len(points)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    keys = [(int(r[2]), int(r[1]), r[0]) for r in rows]
    assert keys == sorted(keys, key=lambda k: (-k[0], k[1], k[2]))
    # A prefill-only point has no decode step: shown as '-', never as a number.
    assert all((r[4] == "-") == (r[2] == "1") for r in rows)


def test_summarize_reads_every_profile_in_a_folder(tmp_path: Path) -> None:
    rng = random.Random()
    for lay, b, g in (("a", 1, 1), ("b", 64, 32)):
        (tmp_path / f"{lay}-b{b}-g{g}.json").write_text(json.dumps(_profile(lay, b, g, rng)))
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--summarize", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    assert out.count("\n| ") == 3 and "| b | 64 | 32 |" in out and "| a | 1 | 1 |" in out


def test_profiling_without_a_layout_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "--layout and --out are required" in proc.stderr
