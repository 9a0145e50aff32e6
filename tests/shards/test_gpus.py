"""Items spread over a host's GPUs by pytest-xdist (`qualify run --gpus`): one worker pinned to each GPU (fake ids
here: no CUDA), items sharing run-wide state in one worker, and one report with the serial run's items and verdict."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import pytest
import yaml

from qualify.cli import main
from qualify.compile import compile_gate_file
from qualify.gpu_workers import GpuSpecError, merge_worker_reports, parse_gpu_ids, parse_gpus, worker_gpu
from qualify.registry import default_registry
from qualify.report.schema import SCHEMA_PATH

ROOT = Path(__file__).resolve().parents[2]


def _gate(tmp_path: Path, values: list[float], limit: float, more: tuple[dict, ...] = ()) -> Path:
    """Gate `a` over `values` (each item notes the GPU its worker saw), then the gates `more`."""
    gate = {"id": "a", "kind": "compare", "requires": ["cpu"], "limit": limit, "note_gpu": True,
            "matrix": {"value": values}}  # fmt: skip
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({"suite": "s", "version": 1, "gates": [gate, *more]}, sort_keys=False))
    return path


def _run(tmp_path: Path, gate: Path, out: str, *extra: str) -> tuple[int, dict]:
    code = main(["run", str(gate), "--out", str(tmp_path / out), "--name", "r", *extra])
    return code, json.loads((tmp_path / out / "r.json").read_text())


def _items(report: dict) -> list[tuple]:
    return [(i["name"], i["status"], tuple(c["observed"] for c in i["checks"])) for i in report["items"]]


def _values(n: int) -> list[float]:
    """n distinct values (item names come from them)."""
    return sorted(v / 1000 for v in random.sample(range(10, 990), n))


@pytest.fixture(autouse=True)
def _no_inherited_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize("spec", ["0,1", "2"])
def test_two_workers_give_the_serial_runs_items_and_verdict(
    tmp_path: Path, spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if spec == "2":  # a count takes the first GPUs this process may use: here, a job's allocation of two
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    values = _values(8)
    limit = values[5]  # some pass, some fail
    gate = _gate(tmp_path, values, limit)
    serial_code, serial = _run(tmp_path, gate, "serial")
    code, spread = _run(tmp_path, gate, "spread", "--gpus", spec)
    assert (code, spread["verdict"], spread["counts"]) == (serial_code, serial["verdict"], serial["counts"])
    assert _items(spread) == _items(serial)  # the serial run's items, in its (compile) order
    assert serial["verdict"] == "FAIL"
    jsonschema.validate(spread, json.loads(SCHEMA_PATH.read_text()))
    # Each item says which GPU ran it, and ran with only that GPU visible.
    for item in spread["items"]:
        assert item["gpu"] in ("0", "1")
        assert f"CUDA_VISIBLE_DEVICES={item['gpu']}" in item["notes"]
    assert "gpu" not in serial["items"][0]
    workers = spread["gpus"]["workers"]
    assert [w["gpu"] for w in workers] == ["0", "1"]
    assert sum(w["items"] for w in workers) == len(values)
    assert spread["gpus"]["ids"] == ["0", "1"]


@pytest.mark.parametrize(("visible", "spec", "gpu"), [("0", "auto", "0"), ("3", "1", "3"), ("0,5", "5", None)])
def test_a_one_gpu_spread_gives_the_serial_runs_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, visible: str, spec: str, gpu: str | None
) -> None:
    # One GPU is one worker: GPU 0 handed on as `--qualify-gpus 0` is that GPU, not a count of none (the first run
    # on a one-GPU host failed so); a lone number the user gives is a count.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    gate = _gate(tmp_path, _values(3), 0.5)
    if gpu is None:  # `5` asks for five GPUs of an allocation of two: refused, nothing written
        assert main(["run", str(gate), "--out", str(tmp_path / "spread"), "--name", "r", "--gpus", spec]) == 2
        assert not (tmp_path / "spread" / "r.json").exists()
        return
    serial_code, serial = _run(tmp_path, gate, "serial")
    code, spread = _run(tmp_path, gate, "spread", "--gpus", spec)
    assert (code, spread["verdict"], _items(spread)) == (serial_code, serial["verdict"], _items(serial))
    assert {i["gpu"] for i in spread["items"]} == {gpu} and spread["gpus"]["ids"] == [gpu]


def test_workers_per_gpu_share_each_gpu_and_give_the_serial_runs_items(tmp_path: Path) -> None:
    values = _values(9)
    gate = _gate(tmp_path, values, values[4])
    serial_code, serial = _run(tmp_path, gate, "serial")
    code, spread = _run(tmp_path, gate, "spread", "--gpus", "0,1", "--workers-per-gpu", "2")
    assert (code, spread["verdict"], _items(spread)) == (serial_code, serial["verdict"], _items(serial))
    jsonschema.validate(spread, json.loads(SCHEMA_PATH.read_text()))
    workers = spread["gpus"]["workers"]
    assert [(w["worker"], w["gpu"]) for w in workers] == [("gw0", "0"), ("gw1", "0"), ("gw2", "1"), ("gw3", "1")]
    assert sum(w["items"] for w in workers) == len(values)  # each item counted once, by the worker that ran it
    assert spread["gpus"]["workers_per_gpu"] == 2 and spread["gpus"]["ids"] == ["0", "1"]
    for item in spread["items"]:
        assert f"CUDA_VISIBLE_DEVICES={item['gpu']}" in item["notes"]


def test_workers_per_gpu_are_refused_where_an_item_needs_its_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    # gates/perf.yaml times kernels: a GPU shared with another worker would bend every sample.
    perf = ROOT / "gates" / "perf.yaml"
    out = tmp_path / "out"
    assert main(["run", str(perf), "--out", str(out), "--gpus", "auto", "--workers-per-gpu", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ERROR: {perf}: gate ") and "(perf_nonregression) needs a GPU to itself" in err
    assert "\n" not in err and not any(out.glob("*"))
    gate = _gate(tmp_path, [0.5], 1.0)
    assert main(["run", str(gate), "--out", str(out), "--workers-per-gpu", "2"]) == 2
    assert "give --gpus too" in capsys.readouterr().err
    assert main(["run", str(gate), "--out", str(out), "--gpus", "auto", "--workers-per-gpu", "0"]) == 2
    assert capsys.readouterr().err.strip() == "--workers-per-gpu 0: at least 1"
    assert not any(out.glob("*"))  # nothing written


def test_items_of_one_group_share_a_worker_and_the_signed_report_verifies(tmp_path: Path) -> None:
    assert main(["keygen", "--out", str(tmp_path / "keys")]) == 0
    values = _values(6)
    shared = {"id": "shared", "kind": "compare", "requires": ["cpu"], "limit": 1.0, "group": "store",
              "matrix": {"value": _values(6)}}  # fmt: skip
    gate = _gate(tmp_path, values, 1.0, (shared,))
    code, report = _run(tmp_path, gate, "out", "--gpus", "0,1", "--sign-key", str(tmp_path / "keys/signing-key.pem"))
    assert code == 0 and report["verdict"] == "PASS" and report["signed"]
    grouped = {i["gpu"] for i in report["items"] if i["gate_id"] == "shared"}
    assert len(grouped) == 1
    assert all(i["nodeid"].endswith(f"::{i['name']}") for i in report["items"])
    envelope = tmp_path / "out" / "r.dsse.json"
    pub = tmp_path / "keys/signing-key.pub.pem"
    assert main(["verify", "--key", str(pub), "--subject", str(tmp_path / "out/r.json"), str(envelope)]) == 0


def test_a_deselected_item_is_recorded_once_and_the_run_is_incomplete(tmp_path: Path) -> None:
    values = _values(5)
    gate = _gate(tmp_path, values, 1.0)
    code, report = _run(tmp_path, gate, "out", "--gpus", "0,1", "-k", f"a[{values[0]}]")
    assert code == 0 and report["verdict"] == "INCOMPLETE"
    statuses = [i["status"] for i in report["items"]]
    assert statuses.count("passed") == 1 and statuses.count("deselected") == 4 and len(statuses) == 5


def test_the_kinds_name_their_shared_state() -> None:
    registry = default_registry()

    def groups(path: str) -> set[str | None]:
        compiled = compile_gate_file(ROOT / path, registry)
        return {registry.get(g.kind).worker_group(g.params) for g in compiled.items}  # type: ignore[misc]

    assert groups("gates/gpu/real-smollm2.yaml") == {"serving"}  # loss (vllm), BoolQ (served), agreement
    assert groups("gates/perf.yaml") == {"timing"}
    assert groups("gates/loss.yaml") == {None}  # Hugging Face on the host: load-balanced
    assert registry.get("kernel_numerics").worker_group is None
    # Only correctness checks of small launches may share a GPU (`--workers-per-gpu`).
    assert {k: registry.get(k).shares_gpu for k in ("kernel_numerics", "perf_nonregression", "loss_increase",
            "accuracy_floor", "greedy_agreement")} == {"kernel_numerics": True, "perf_nonregression": False,
            "loss_increase": False, "accuracy_floor": False, "greedy_agreement": False}  # fmt: skip


def test_gpu_specs() -> None:
    assert parse_gpu_ids("0", environ={}) == ["0"]  # ids as the controller hands them on: never a count
    assert parse_gpu_ids("2,0", environ={"CUDA_VISIBLE_DEVICES": "0,2"}) == ["2", "0"]
    with pytest.raises(GpuSpecError, match="GPU 1 is not in CUDA_VISIBLE_DEVICES=0"):
        parse_gpu_ids("1", environ={"CUDA_VISIBLE_DEVICES": "0"})
    with pytest.raises(GpuSpecError, match=r"--qualify-gpus auto: 'auto' is not a GPU index or UUID \(GPU ids"):
        parse_gpu_ids("auto", environ={})  # resolved before pytest: a spec here is a bug, said as such
    alloc = {"CUDA_VISIBLE_DEVICES": "2,5,7"}
    assert parse_gpus("auto", environ=alloc) == ["2", "5", "7"]
    assert parse_gpus("2", environ=alloc) == ["2", "5"]  # the first two of the allocation, never GPUs 0 and 1
    assert parse_gpus("7,2", environ=alloc) == ["7", "2"]
    assert parse_gpus("auto", environ={}, count_gpus=lambda: 3) == ["0", "1", "2"]
    assert parse_gpus("4", environ={}, count_gpus=lambda: 8) == ["0", "1", "2", "3"]
    assert parse_gpus(" 0, 3 ", environ={}) == ["0", "3"]
    uuid = "GPU-8f1c2d3e-aaaa-bbbb-cccc-0123456789ab"
    assert parse_gpus(uuid, environ={}) == [uuid]
    for bad, env, why in [
        ("0", {}, "1 to 8"), ("9", {}, "1 to 8"), ("4", alloc, "1 to 3"), ("0,x", {}, "'x' is not a GPU"),
        ("1,1", {}, "named twice"), ("0;rm -rf", {}, "is not a GPU"), ("0,2", alloc, "GPU 0 is not in"),
        ("auto", {"CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES is empty"), ("auto", {}, "nvidia-smi lists none"),
    ]:  # fmt: skip
        count = 0 if bad == "auto" else 8
        with pytest.raises(GpuSpecError, match=why):
            parse_gpus(bad, environ=env, count_gpus=lambda count=count: count)
    assert worker_gpu("gw1", ["4", "7"]) == "7"
    with pytest.raises(GpuSpecError, match="has no GPU"):
        worker_gpu("gw2", ["4", "7"])


def test_a_crashed_worker_fails_the_run_and_its_report_is_still_written(tmp_path: Path) -> None:
    crash = {"id": "crash", "kind": "compare", "requires": ["cpu"], "limit": 1.0, "crash_process": True,
             "matrix": {"value": [0.5]}}  # fmt: skip
    gate = _gate(tmp_path, _values(4), 1.0, (crash,))
    code, report = _run(tmp_path, gate, "out", "--gpus", "0,1")
    assert code == 1 and report["verdict"] == "FAIL"
    statuses = {i["name"]: i["status"] for i in report["items"]}
    assert statuses["crash[0.5]"] == "error" and len(statuses) == 5
    assert not any(s == "passed" for n, s in statuses.items() if n.startswith("crash"))
    down = [w for w in report["gpus"]["workers"] if w["error"]]
    assert len(down) == 1 and down[0]["gpu"] in ("0", "1")
    lost = [i for i in report["items"] if i["status"] == "error"]
    assert all("went down" in i["reason"] and not i["nodeid"].startswith("/") for i in lost)


def test_cli_refuses_a_bad_spec_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gate = _gate(tmp_path, [0.5], 1.0)
    assert main(["run", str(gate), "--out", str(tmp_path / "out"), "--gpus", "0,0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "--gpus 0,0: GPU 0 is named twice (one worker per GPU)"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_plain_pytest_needs_one_worker_per_gpu(pytester: pytest.Pytester, tmp_path: Path) -> None:
    gate = _gate(tmp_path, [0.5], 1.0)
    result = pytester.runpytest_inprocess(str(gate), "-p", "no:cacheprovider", "--qualify-gpus", "0,1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    want = "--qualify-gpus 0,1: needs pytest-xdist with -n 2 --dist load --max-worker-restart 0 "
    result.stderr.fnmatch_lines([f"*{want}*"])
    shared = pytester.runpytest_inprocess(str(gate), "-p", "no:cacheprovider", "--qualify-gpus", "0,1",
                                          "--qualify-workers-per-gpu", "3")  # fmt: skip
    assert shared.ret == pytest.ExitCode.USAGE_ERROR
    shared.stderr.fnmatch_lines(
        ["*needs pytest-xdist with -n 6 --dist load --max-worker-restart 0 (3 workers per GPU*"]
    )
    alone = pytester.runpytest_inprocess(str(gate), "-p", "no:cacheprovider", "--qualify-workers-per-gpu", "2")
    assert alone.ret == pytest.ExitCode.USAGE_ERROR
    alone.stderr.fnmatch_lines(["*--qualify-workers-per-gpu 2: pins workers to GPUs, give --qualify-gpus*"])


def test_plain_pytest_refuses_timed_items_on_a_shared_gpu(pytester: pytest.Pytester) -> None:
    perf = ROOT / "gates" / "perf.yaml"
    result = pytester.runpytest_inprocess(str(perf), "-p", "no:cacheprovider", "-p", "xdist", "-n", "2", "--dist",
                                          "load", "--max-worker-restart", "0", "--qualify-gpus", "0",
                                          "--qualify-workers-per-gpu", "2")  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*(perf_nonregression) needs a GPU to itself, so --workers-per-gpu must be 1*"])


def _part(report_items: list[dict], compiled: list[dict], **extra: object) -> dict:
    report = {"gate_files": [], "seed": 0, "tool": {}, "suites": ["s"], "items": report_items, "inputs": [],
              "collect_errors": []}  # fmt: skip
    return {"report": report, "compiled": compiled, "exitstatus": 0, **extra}


def _item(name: str, status: str, gpu: str | None = None) -> dict:
    item = {"name": name, "nodeid": f"g.yaml::{name}", "status": status, "checks": [], "gate_id": "a",
            "specializations": {"qualified": [], "dispatched": []}}  # fmt: skip
    return {**item, "gpu": gpu} if gpu else item


def test_a_worker_that_went_down_leaves_its_items_as_errors_not_passes() -> None:
    compiled = [_item(n, "error") for n in ("a[1]", "a[2]", "a[3]")]
    parts = {
        "gw0": _part([_item("a[1]", "passed", "0"), _item("a[3]", "passed", "0")], compiled),
        "gw1": {"error": "worker 'gw1' crashed while running 'g.yaml::a[2]'"},
    }
    report = merge_worker_reports(parts, ["0", "1"], provenance={}, release={}, strict=False, signed=False)
    assert [i["status"] for i in report["items"]] == ["passed", "error", "passed"]
    assert "crashed while running" in report["items"][1]["reason"]
    assert report["verdict"] == "FAIL"
    assert report["gpus"]["workers"][1] == {"worker": "gw1", "gpu": "1", "items": 0, "exitstatus": None,
                                            "error": "worker 'gw1' crashed while running 'g.yaml::a[2]'"}  # fmt: skip


def test_workers_that_are_not_parts_of_one_run_are_refused() -> None:
    compiled = [_item("a[1]", "error")]
    one = _part([_item("a[1]", "passed", "0")], compiled)
    with pytest.raises(GpuSpecError, match="ran in two workers"):
        merge_worker_reports({"gw0": one, "gw1": _part([_item("a[1]", "passed", "1")], compiled)}, ["0", "1"],
                             provenance={}, release={}, strict=False, signed=False)  # fmt: skip
    other = _part([], [_item("b[1]", "error")])
    with pytest.raises(GpuSpecError, match="compiled other items"):
        merge_worker_reports({"gw0": one, "gw1": other}, ["0", "1"], provenance={}, release={}, strict=False,
                             signed=False)  # fmt: skip
    with pytest.raises(GpuSpecError, match="no worker returned a report"):
        merge_worker_reports({"gw0": {"error": "boom"}}, ["0"], provenance={}, release={}, strict=False,
                             signed=False)  # fmt: skip
