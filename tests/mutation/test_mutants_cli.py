"""`qualify mutants` end to end under the Triton interpreter: a fresh process per mutant imports its copy, the
numerics gate kills the interpreter mutants of the catalog, a survivor fails the run, and the result is signed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The small cells share one shape through `defaults`; each gate adds the batch that reaches one code path.
GATE = """
suite: numerics-mutation-small
version: 1
defaults:
  requires: [cpu, triton]
  device: cpu
  second_oracle: none
  repeats: 1
  num_qo_heads: 8
  num_kv_heads: 2
  head_dim: 64
  page_size: 8
  cartridge_v: fp8_e4m3
  live_v: fp8_e4m3
  cartridge: {id: c16, length: 16, sink: true}
gates:
  - id: small
    kind: kernel_numerics
    matrix:
      phase: [prefill, decode]
    batch: {id: fresh, q_lens: [11, 24], live_lens: [11, 24]}
  # 33 requests: the decode default packs two per program (in a cascade's live walk), where the packing mutant shows.
  - id: small-packed
    kind: kernel_numerics
    phase: decode
    batch: {id: b33, live_lens: [5, 1, 9, 17, 8, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
                                 3, 3, 3, 3, 3, 3]}
  # 3 requests x 2 KV heads leave the SMs idle: the decode default splits each request's 16 + 600 keys 4 ways.
  - id: small-split
    kind: kernel_numerics
    phase: decode
    batch: {id: b3, live_lens: [600, 1, 41]}
  # The decode cascade side by side: 18 requests take two 64-row tiles of the cascade, a 200-position cartridge two
  # ranges, and 36 programs (under half the SMs) split the live walk 2 ways.
  - id: small-cascade
    kind: kernel_numerics
    phase: decode
    decode_cascade: true
    cartridge: {id: c200, length: 200, sink: true}
    batch: {id: b18, live_lens: [5, 1, 9, 17, 8, 3, 40, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 600]}
"""


def _qualify(args: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [sys.executable, "-m", "qualify.cli", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


@pytest.mark.slow
def test_the_gate_kills_every_interpreter_mutant_and_the_report_is_signed(tmp_path: Path) -> None:
    gate = tmp_path / "small.yaml"
    gate.write_text(GATE)
    assert _qualify(["keygen", "--out", str(tmp_path / "keys")], ROOT).returncode == 0
    key = tmp_path / "keys" / "signing-key.pem"
    # The unmutated copy runs after the mutants, only the items that killed one (the whole gate beside them is
    # the default, which the survivor test below takes).
    args = ["mutants", "--interpreter-only", "--gate", str(gate), "--jobs", "2", "--out", str(tmp_path / "out"),
            "--name", "run", "--sign-key", str(key), "--unmutated", "killing-items"]  # fmt: skip
    proc = _qualify(args, ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "run.json").read_text())
    assert report["report_format"] == "cartridge-qualify/mutation-report"
    assert report["verdict"] == "PASS" and report["score"] == 1.0
    assert report["baseline"]["status"] == "passed"
    rows = {r["id"]: r for r in report["mutants"]}
    assert "packed-requests-see-each-other" in rows and len(rows) >= 6
    assert all(r["status"] == "killed" and r["killed_by"] for r in rows.values()), rows
    # Only the two-per-program decode cell can see packed requests leak into each other, and only the split
    # cell reaches the split decode's combine and its arrival counter (a second launch of one plan).
    assert rows["packed-requests-see-each-other"]["killed_by"][0]["item"] == "small-packed"
    assert {rows[i]["killed_by"][0]["item"] for i in rows if i.startswith("split-")} == {"small-split"}
    # From batch 16 on the default decode is a cascade too (heuristics.CASCADE_MIN_BATCH): 33 requests reach it.
    assert {rows[i]["killed_by"][0]["item"] for i in rows if i.startswith("cascade-")} <= {
        "small-cascade",
        "small-packed",
    }
    killers = {k["nodeid"] for r in rows.values() for k in r["killed_by"]}
    assert report["baseline"]["scope"] == "killing-items" and set(report["baseline"]["items"]) == killers
    unmutated = json.loads((tmp_path / "out" / "run.children" / "unmutated.json").read_text())
    assert killers <= {i["nodeid"] for i in unmutated["items"] if i["status"] == "passed"}
    assert f"unmutated copy: passed on the {len(killers)} items that killed a mutant" in proc.stdout
    rearm = rows["split-counter-not-rearmed"]["killed_by"][0]["failed_checks"]
    assert "a second launch of the same plan" in rearm
    children = sorted(p.name for p in (tmp_path / "out" / "run.children").glob("*.json"))
    assert children == sorted(["unmutated.json", *(f"{i}.json" for i in rows)])
    pub = tmp_path / "keys" / "signing-key.pub.pem"
    verified = _qualify(["verify", str(tmp_path / "out" / "run.dsse.json"), "--key", str(pub), "-v",
                         "--subject", str(tmp_path / "out" / "run.json")], ROOT)  # fmt: skip
    assert verified.returncode == 0, verified.stderr
    assert "child-report:packed-requests-see-each-other.json" in verified.stdout
    # A mutation envelope is no qualification report: a perf gate must not take it as its release baseline.
    from qualify.errors import QualifyError
    from qualify.perf.baseline_report import load_verified_report

    with pytest.raises(QualifyError, match="not a qualification report"):
        load_verified_report(tmp_path / "out" / "run.dsse.json", pub)


def _catalog(tmp_path: Path, mutants: str) -> Path:
    (tmp_path / "kernels").symlink_to(ROOT / "kernels", target_is_directory=True)
    one_cell = GATE.split("  # 33 requests")[0].replace("phase: [prefill, decode]", "phase: [decode]")
    assert "small-packed" not in one_cell and "phase: [decode]" in one_cell
    (tmp_path / "gate.yaml").write_text(one_cell)
    (tmp_path / "mutants").mkdir()
    path = tmp_path / "mutants" / "c.yaml"
    path.write_text("version: 1\ntarget: ../kernels/cartridge_attn\ngate: [../gate.yaml]\nmutants:\n" + mutants)
    return path


COMMENT = "# The running max is kept in scaled log2 units"
COMMENT_EDIT = f"""  - id: comment-edit
    category: online-softmax
    description: A comment changes; the kernel computes the same.
    file: _kernel.py
    find: "{COMMENT}"
    replace: "# (edited)"
"""


@pytest.mark.slow
def test_a_survivor_fails_the_run_and_an_argued_one_is_reported_equivalent(tmp_path: Path) -> None:
    catalog = _catalog(
        tmp_path,
        COMMENT_EDIT
        + f"""  - id: comment-edit-argued
    category: online-softmax
    description: Another comment edit, argued equivalent.
    file: _kernel.py
    find: "{COMMENT}"
    replace: "# (edited again)"
    equivalent: Only a comment changes; the compiled kernel is the same for every input.
""",
    )
    proc = _qualify([
        "mutants", str(catalog), "--jobs", "2", "--out", str(tmp_path / "out"), "--name", "s",
    ], ROOT)  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "s.json").read_text())
    assert report["verdict"] == "FAIL" and report["survivors"] == ["comment-edit"]
    assert {r["id"]: r["status"] for r in report["mutants"]} == {
        "comment-edit": "survived",
        "comment-edit-argued": "equivalent",
    }
    assert report["score"] == 0.0
    assert report["baseline"]["scope"] == "whole-gate" and report["baseline"]["items"] is None


def test_a_kill_by_an_item_the_unmutated_kernel_also_fails_fails_the_run(tmp_path: Path) -> None:
    # The gate's one item fails whatever the kernel: it "kills" the comment edit, and the unmutated copy, run on the
    # killing items alone, fails it too, so the kill means nothing and the run fails.
    catalog = _catalog(tmp_path, COMMENT_EDIT)
    (tmp_path / "gate.yaml").write_text(
        "suite: s\nversion: 1\ngates:\n  - id: always-fails\n    kind: compare\n    requires: [cpu]\n"
        "    value: 2.0\n    limit: 1.0\n"
    )
    proc = _qualify(["mutants", str(catalog), "--out", str(tmp_path / "out"), "--name", "f", "--unmutated",
                     "killing-items"], ROOT)  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "f.json").read_text())
    assert report["verdict"] == "FAIL" and report["mutants"][0]["status"] == "killed"
    assert report["baseline"]["status"] == "failed" and report["baseline"]["scope"] == "killing-items"
    assert report["baseline"]["items"] == [report["mutants"][0]["killed_by"][0]["nodeid"]]
    assert report["report_version"] == 3
    assert "the gate does not pass the unmutated kernel" in proc.stderr


def test_a_child_out_of_gpu_memory_beside_others_runs_again_alone(tmp_path: Path) -> None:
    # The gate's one item runs out of GPU memory the first time, as it did beside seven other mutants on an 80 GB
    # card: that shows nothing, so the mutant runs again alone, where the item's check fails, and the report keeps
    # both runs. (The item fails whatever the kernel, so the unmutated copy fails it too and the run fails.)
    catalog = _catalog(tmp_path, COMMENT_EDIT)
    (tmp_path / "gate.yaml").write_text(
        "suite: s\nversion: 1\ngates:\n  - id: oom-once\n    kind: compare\n    requires: [cpu]\n"
        "    value: 2.0\n    limit: 1.0\n    out_of_memory_once: marker\n"
    )
    proc = _qualify(["mutants", str(catalog), "--jobs", "2", "--out", str(tmp_path / "out"), "--name", "o",
                     "--unmutated", "killing-items"], ROOT)  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "o.json").read_text())
    row = report["mutants"][0]
    assert row["status"] == "killed" and row["killed_by"][0]["failed_checks"] == "value" and not row["out_of_memory"]
    first = row["retried_alone"]
    assert first["status"] == "inconclusive" and first["out_of_memory"] == [row["killed_by"][0]["nodeid"]]
    assert "ran out of GPU memory" in first["reason"] and report["baseline"]["retried_alone"] is None
    assert "alone, after running out of GPU memory: [1/1] killed" in proc.stdout
    children = sorted(p.name for p in (tmp_path / "out" / "o.children").glob("*.json"))
    assert children == ["comment-edit.alone.json", "comment-edit.json", "unmutated.json"]


def test_a_stale_edit_is_a_usage_error_and_nothing_is_written(tmp_path: Path) -> None:
    catalog = _catalog(
        tmp_path,
        """  - id: stale
    category: masking
    description: An edit whose text the kernel no longer holds.
    file: _kernel.py
    find: "this text is not in the kernel"
    replace: "x"
""",
    )
    proc = _qualify(["mutants", str(catalog), "--out", str(tmp_path / "out")], ROOT, timeout=120)
    assert proc.returncode == 2
    assert "mutant stale: its text no longer occurs in _kernel.py" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
