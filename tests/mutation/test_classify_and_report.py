"""What a child's report says about a mutant, the score and verdict, and the signed mutation report."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.mutation.catalog import Mutant
from qualify.mutation.cli import killing_items
from qualify.mutation.execute import ChildRun, GateItemRef, MutantStatus, classify, items_expression
from qualify.mutation.materialize import Copy
from qualify.mutation.report import mutant_row, summarize


def _copy(tmp_path: Path, kernel: bytes = b"kernel source") -> tuple[Copy, str]:
    import hashlib

    pkg = tmp_path / "cartridge_attn"
    pkg.mkdir()
    (pkg / "_kernel.py").write_bytes(kernel)
    return Copy(tmp_path, pkg, "t", "e"), hashlib.sha256(kernel).hexdigest()


def _item(name: str, status: str, sha: str | None = None) -> dict:
    m = {"kernel": {"source_sha256": sha}} if sha else {}
    checks = [{"name": "rel L2", "passed": status == "passed"}]
    return {"name": name, "status": status, "measurements": m, "checks": checks}


def test_a_failed_or_errored_item_kills_and_a_full_pass_survives(tmp_path: Path) -> None:
    copy, sha = _copy(tmp_path)
    killed = classify({"verdict": "FAIL", "items": [_item("a", "passed", sha), _item("b", "failed", sha)]}, copy)
    assert killed.status is MutantStatus.KILLED and [k["item"] for k in killed.killed_by] == ["b"]
    assert killed.killed_by[0]["failed_checks"] == "rel L2"
    errored = {**_item("a", "error"), "reason": "RuntimeError: CUDA error: an illegal memory access"}
    crashed = classify({"verdict": "FAIL", "items": [errored]}, copy)
    assert crashed.status is MutantStatus.KILLED and "illegal memory access" in crashed.killed_by[0]["reason"]
    survived = classify({"verdict": "PASS", "items": [_item("a", "passed", sha)]}, copy)
    assert survived.status is MutantStatus.SURVIVED


def test_skipped_items_with_nothing_failed_show_nothing(tmp_path: Path) -> None:
    copy, sha = _copy(tmp_path)
    run = classify({"verdict": "INCOMPLETE", "items": [_item("a", "passed", sha), _item("b", "skipped")]}, copy)
    assert run.status is MutantStatus.INCONCLUSIVE
    empty = classify({"verdict": "PASS", "items": []}, copy)
    assert empty.status is MutantStatus.INCONCLUSIVE


def test_a_report_from_another_kernel_source_is_broken_not_a_kill(tmp_path: Path) -> None:
    copy, _ = _copy(tmp_path)
    run = classify({"verdict": "FAIL", "items": [_item("a", "failed", "f" * 64)]}, copy)
    assert run.status is MutantStatus.BROKEN and "other than the copy's" in run.reason


def _in(gate: str, item: dict) -> dict:
    return {**item, "nodeid": f"{gate}::{item['name']}"}


def test_a_baseline_of_the_killing_items_passes_only_if_each_of_them_ran_and_passed(tmp_path: Path) -> None:
    copy, sha = _copy(tmp_path)
    name = "numerics-original[prefill-bf16-q17-9_l33-25]"
    needed = [f"a.yaml::{name}", "a.yaml::small"]
    ran = [_in("a.yaml", _item(name, "passed", sha)), _in("a.yaml", _item("small", "passed", sha)),
           _in("a.yaml", _item("other", "deselected"))]  # fmt: skip
    passed = classify({"verdict": "INCOMPLETE", "items": ran}, copy, needed)
    assert passed.status is MutantStatus.SURVIVED  # INCOMPLETE by design: the rest was deselected
    missing = classify({"verdict": "INCOMPLETE", "items": ran[:1] + ran[2:]}, copy, needed)
    assert missing.status is MutantStatus.INCONCLUSIVE and "a.yaml::small" in missing.reason
    failed = classify({"verdict": "FAIL", "items": [_in("a.yaml", _item(name, "failed", sha)), ran[1]]}, copy, needed)
    assert failed.status is MutantStatus.KILLED and failed.killed_by[0]["nodeid"] == needed[0]
    # Another gate file's item of the same name is not the one that killed: it cannot stand in for it.
    elsewhere = [_in("b.yaml", _item("small", "passed", sha)), _in("a.yaml", _item("small", "skipped"))]
    other = classify({"verdict": "INCOMPLETE", "items": elsewhere}, copy, ["a.yaml::small"])
    assert other.status is MutantStatus.INCONCLUSIVE


def test_the_killing_items_are_every_kill_s_item_or_none_when_no_expression_selects_them() -> None:
    def killed(*items: tuple[str, str]) -> tuple[ChildRun, None]:
        by = [{"item": name, "nodeid": node, "status": "failed"} for node, name in items]
        return ChildRun(MutantStatus.KILLED, "FAIL", 1, 1.0, killed_by=by), None

    runs = {"m1": killed(("a.yaml::x[1]", "x[1]")), "m2": killed(("b.yaml::x[1]", "x[1]"), ("a.yaml::y", "y"))}
    assert killing_items(runs) == [GateItemRef("a.yaml::x[1]", "x[1]"), GateItemRef("a.yaml::y", "y"),
                                   GateItemRef("b.yaml::x[1]", "x[1]")]  # fmt: skip
    survived = {"m": (ChildRun(MutantStatus.SURVIVED, "PASS", 0, 1.0), None)}
    assert killing_items(survived) is None  # nothing killed: the whole gate runs
    assert killing_items({"m": killed(("a.yaml::x y", "x y"))}) is None  # no -k expression holds the name


def test_an_expression_of_item_names_selects_each_of_them_by_pytest_s_own_matcher() -> None:
    from _pytest.mark.expression import Expression

    names = ["numerics-extended[decode-bf16-8-sink1+15-ragged]", "numerics-envelope-decode[bf16-edge-b16-l1]",
             "small"]  # fmt: skip
    others = ["numerics-envelope-decode[bf16-edge-b16-l128]", "numerics-envelope-p16-decode[bf16-edge-b16-l1]"]
    expr = items_expression(names)
    assert expr is not None
    compiled = Expression.compile(expr)

    def selects(item: str) -> bool:  # -k matches a substring of the item's name, case-insensitively
        return compiled.evaluate(lambda sub, **_: sub.lower() in item.lower())

    assert all(selects(n) for n in names) and not any(selects(o) for o in others)
    for bad in ([], ["a b"], ["x=1"], ["or"], ["ok", "(paren)"]):
        assert items_expression(bad) is None, bad


def _m(ident: str, equivalent: str | None = None) -> Mutant:
    return Mutant(id=ident, category="masking", description="d", file="_kernel.py", find="a", replace="b",
                  equivalent=equivalent)  # fmt: skip


def _run(status: MutantStatus) -> ChildRun:
    return ChildRun(status, None, 0, 1.0)


ARGUED = "no input can tell: the edited branch is dead for every shape the API admits"


@pytest.mark.parametrize(
    ("baseline", "statuses", "equivalent", "verdict", "score"),
    [
        (MutantStatus.SURVIVED, [MutantStatus.KILLED, MutantStatus.KILLED], None, "PASS", 1.0),
        (MutantStatus.SURVIVED, [MutantStatus.KILLED, MutantStatus.SURVIVED], None, "FAIL", 0.5),
        (MutantStatus.SURVIVED, [MutantStatus.KILLED, MutantStatus.SURVIVED], ARGUED, "PASS", 1.0),
        (MutantStatus.SURVIVED, [MutantStatus.KILLED, MutantStatus.KILLED], ARGUED, "FAIL", 1.0),  # argument wrong
        (MutantStatus.SURVIVED, [MutantStatus.KILLED, MutantStatus.BROKEN], None, "INCOMPLETE", 1.0),
        (MutantStatus.SURVIVED, [MutantStatus.KILLED, MutantStatus.INCONCLUSIVE], None, "INCOMPLETE", 1.0),
        (MutantStatus.KILLED, [], None, "FAIL", None),  # the gate fails the unmutated kernel
        (MutantStatus.BROKEN, [MutantStatus.KILLED], None, "FAIL", 1.0),  # its run broke (a hang, a crash)
        (MutantStatus.INCONCLUSIVE, [MutantStatus.KILLED], None, "INCOMPLETE", 1.0),  # it showed nothing
    ],
)
def test_score_and_verdict(baseline, statuses, equivalent, verdict, score) -> None:
    rows = [mutant_row(_m("m0"), _run(statuses[0]), None)] if statuses else []
    if len(statuses) > 1:
        rows.append(mutant_row(_m("m1", equivalent), _run(statuses[1]), None))
    got = summarize(_run(baseline), rows)
    assert got["verdict"] == verdict
    assert got["score"] == score


def test_kills_by_errors_alone_are_named_apart(tmp_path: Path) -> None:
    copy, sha = _copy(tmp_path)
    by_check = classify({"verdict": "FAIL", "items": [_item("a", "error"), _item("b", "failed", sha)]}, copy)
    by_error = classify({"verdict": "FAIL", "items": [_item("a", "error")]}, copy)
    rows = [mutant_row(_m("m-check"), by_check, None), mutant_row(_m("m-crash"), by_error, None)]
    got = summarize(_run(MutantStatus.SURVIVED), rows)
    assert got["score"] == 1.0 and got["verdict"] == "PASS"  # a crash detects the mutant
    assert got["killed_only_by_errors"] == ["m-crash"]


def test_items_out_of_gpu_memory_kill_nothing(tmp_path: Path) -> None:
    # On a GPU shared with other runs an allocation can fail for the host's reasons: that shows nothing about the
    # mutant, so a run whose only error is one is inconclusive and makes the verdict INCOMPLETE, never PASS.
    copy, sha = _copy(tmp_path)
    oom = {**_item("big", "error"), "reason": "OutOfMemoryError: CUDA out of memory. Tried to allocate 704.00 MiB."}
    starved = classify({"verdict": "FAIL", "items": [_item("a", "passed", sha), oom]}, copy)
    assert starved.status is MutantStatus.INCONCLUSIVE and not starved.killed_by
    assert "1 items ran out of GPU memory" in starved.reason and "big" in starved.reason
    for reason in (
        "RuntimeError: CUDA error: out of memory",
        "RuntimeError: CUDA driver error: CUDA_ERROR_OUT_OF_MEMORY",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    ):
        host = {**_item("big", "error"), "reason": reason}
        assert classify({"verdict": "FAIL", "items": [host]}, copy).status is MutantStatus.INCONCLUSIVE, reason
    # A crash of the kernel's own making still kills beside it; Triton's "out of resources" (shared memory a
    # mutant's tile asks for) is the kernel's, not the host's.
    crash = {**_item("c", "error"), "reason": "RuntimeError: CUDA error: an illegal memory access was encountered"}
    assert classify({"verdict": "FAIL", "items": [oom, crash]}, copy).killed_by[0]["item"] == "c"
    smem = {**_item("s", "error"), "reason": "OutOfResources: out of resource: shared memory, Required: 262144"}
    assert classify({"verdict": "FAIL", "items": [smem]}, copy).status is MutantStatus.KILLED
    # With required items: one out of memory leaves the run inconclusive even when the others passed.
    required = classify({"verdict": "FAIL", "items": [_in("g", _item("a", "passed", sha)), _in("g", oom)]}, copy,
                        required=["g::a"])  # fmt: skip
    assert required.status is MutantStatus.INCONCLUSIVE
    # A failed check beside it still kills, and the kill names that item alone.
    both = classify({"verdict": "FAIL", "items": [oom, _item("b", "failed", sha)]}, copy)
    assert both.status is MutantStatus.KILLED and [k["item"] for k in both.killed_by] == ["b"]
    rows = [mutant_row(_m("m-starved"), starved, None), mutant_row(_m("m-check"), both, None)]
    got = summarize(_run(MutantStatus.SURVIVED), rows)
    assert got["verdict"] == "INCOMPLETE" and got["counts"]["inconclusive"] == 1 and got["score"] == 1.0
