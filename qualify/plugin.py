"""The pytest plugin: gate files become test items; the run's results become a (signed) report.

Loaded through the `pytest11` entry point, so `pytest gates/` and `qualify run` behave the same.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from qualify.compile import GateItem, compile_gate_file, looks_like_gate_file
from qualify.console_summary import summary_lines
from qualify.errors import GateFileError, QualifyError
from qualify.failure import GateCheckFailed
from qualify.progress import ItemProgress
from qualify.registry import default_registry
from qualify.results import ItemOutcome, ItemResult, Status, Verdict
from qualify.session import SessionState
from qualify.shard_plan import SHARD_REASON, ShardPlan, ShardSpec

STATE_KEY = pytest.StashKey[SessionState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qualify", "cartridge-qualify gates")
    group.addoption("--qualify-out", metavar="DIR", help="write the JSON report (and envelope) into DIR")
    group.addoption("--qualify-name", metavar="NAME", help="report file name stem (default: suite and time)")
    group.addoption("--qualify-sign-key", metavar="PATH", help="Ed25519 private key (PEM) to sign the report")
    group.addoption(
        "--qualify-strict",
        action="store_true",
        help="release run: refuse to finish unsigned; INCOMPLETE or inconclusive is a failure",
    )
    group.addoption(
        "--qualify-non-release", action="store_true", help="mark the report as a non-release (development) run"
    )
    group.addoption("--qualify-seed", type=int, default=0, help="seed for every random input (default 0)")
    group.addoption("--qualify-baseline", metavar="PATH", help="signed report (.dsse.json) to compare against")
    group.addoption("--qualify-traceback", action="store_true", help="show Python tracebacks instead of gate reports")
    group.addoption("--qualify-shard", metavar="K/N", help="run only shard K of N of the compiled items")
    group.addoption(
        "--qualify-shard-durations", metavar="REPORT.json", help="balance the shards by this report's item durations"
    )
    group.addoption(
        "--qualify-gpus",
        metavar="IDS",
        help="spread the items over these GPUs, one pytest-xdist worker each (with -n COUNT --dist load)",
    )
    group.addoption(
        "--qualify-workers-per-gpu",
        type=int,
        default=1,
        metavar="N",
        help="with --qualify-gpus: N workers pinned to each GPU (-n GPUS x N), for kinds whose items may share one",
    )


def pytest_configure(config: pytest.Config) -> None:
    opt = config.option
    sign_key = opt.qualify_sign_key or os.environ.get("QUALIFY_SIGNING_KEY") or None
    if opt.qualify_strict and opt.qualify_out and not sign_key:
        raise pytest.UsageError(
            "--qualify-strict is a release run and refuses to finish unsigned: "
            "pass --qualify-sign-key PATH or set QUALIFY_SIGNING_KEY"
        )
    out = opt.qualify_out
    try:
        shard = ShardSpec.parse(opt.qualify_shard) if opt.qualify_shard else None
    except QualifyError as exc:
        raise pytest.UsageError(exc.diagnostics()) from None
    config.stash[STATE_KEY] = SessionState(
        registry=default_registry(),
        started_at=datetime.now(UTC),
        argv=list(config.invocation_params.args),
        out_dir=Path(out) if out else None,
        report_name=opt.qualify_name,
        sign_key=Path(sign_key) if sign_key else None,
        strict=bool(opt.qualify_strict),
        non_release=bool(opt.qualify_non_release),
        seed=int(opt.qualify_seed),
        baseline=Path(opt.qualify_baseline) if opt.qualify_baseline else None,
        shard=shard,
        shard_durations=Path(opt.qualify_shard_durations) if opt.qualify_shard_durations else None,
    )
    _configure_gpus(config, config.stash[STATE_KEY])
    if opt.qualify_shard_durations and not opt.qualify_shard:
        raise pytest.UsageError("--qualify-shard-durations balances shards: give --qualify-shard K/N too")
    if opt.qualify_strict and opt.qualify_shard:
        raise pytest.UsageError(
            "--qualify-strict is a release run and a shard is part of one: run the shards without it and "
            "`qualify merge --strict` them"
        )
    config.addinivalue_line("markers", "gate(kind): a compiled cartridge-qualify gate item")
    selection = deselection_options(config)
    if opt.qualify_strict and selection:
        raise pytest.UsageError(
            f"--qualify-strict is a release run and runs every compiled item: drop {' '.join(selection)}"
        )


def _configure_gpus(config: pytest.Config, state: SessionState) -> None:
    """--qualify-gpus: a worker pins itself to its GPU and writes nothing; the controller collects the workers'
    parts of the report (pytest_testnodedown) and writes the one report."""
    spec = config.option.qualify_gpus
    per_gpu = int(config.option.qualify_workers_per_gpu)
    if per_gpu < 1:
        raise pytest.UsageError(f"--qualify-workers-per-gpu {per_gpu}: at least 1")
    if not spec:
        if per_gpu != 1:
            raise pytest.UsageError(f"--qualify-workers-per-gpu {per_gpu}: pins workers to GPUs, give --qualify-gpus")
        return
    from qualify.gpu_workers import check_shares_gpu, parse_gpu_ids, worker_gpu

    try:
        state.gpus = parse_gpu_ids(spec)
        state.workers_per_gpu = per_gpu
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None:
            state.gpu = worker_gpu(str(workerinput["workerid"]), state.gpus, per_gpu)
    except QualifyError as exc:
        raise pytest.UsageError(exc.diagnostics()) from None
    if state.gpu is not None:
        # Before any runner imports torch: this process sees its one GPU, as device 0, numbered as nvidia-smi does.
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        os.environ["CUDA_VISIBLE_DEVICES"] = state.gpu
        state.out_dir, state.sign_key = None, None
        return
    workers = getattr(config.option, "numprocesses", None)
    restarts = str(getattr(config.option, "maxworkerrestart", None))
    count = len(state.gpus) * per_gpu
    if workers != count or getattr(config.option, "dist", "no") == "no" or restarts != "0":
        each = "one worker per GPU" if per_gpu == 1 else f"{per_gpu} workers per GPU"
        raise pytest.UsageError(
            f"--qualify-gpus {spec}: needs pytest-xdist with -n {count} --dist load --max-worker-restart 0 "
            f"({each}, never replaced; `qualify run --gpus` passes them)"
        )
    if per_gpu > 1:
        # Here too, not only in `qualify run`: plain pytest must not time items on a shared GPU either.
        root = Path(config.invocation_params.dir)
        try:
            check_shares_gpu([root / a.split("::", 1)[0] for a in config.args], state.registry)
        except QualifyError as exc:
            raise pytest.UsageError(exc.diagnostics()) from None
    state.worker_parts = {}


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--qualify-gpus: xdist's scope scheduling, a scope per item except that the items of one worker group
    (`GateKindSpec.worker_group`) are one scope, so one worker runs them (`qualify.gpu_workers`)."""
    state = config.stash.get(STATE_KEY, None)
    if state is None or state.worker_parts is None:
        return None
    from qualify.gpu_workers import group_scheduler

    return group_scheduler(config, log, state.registry)


def deselection_options(config: pytest.Config) -> list[str]:
    """The options that select a subset of the compiled items, as they were given (`-k EXPR`, `-m EXPR`)."""
    opt = config.option
    given = [("-k", getattr(opt, "keyword", "")), ("-m", getattr(opt, "markexpr", ""))]
    out = [f"{flag} {expr}" for flag, expr in given if expr]
    out += [f"--deselect {nodeid}" for nodeid in getattr(opt, "deselect", None) or []]
    return out


# First, before `-k`/`-m` deselect: every shard then records another shard's items as that shard's, whatever it selects.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --qualify-shard K/N, keep this shard's gate items and deselect the others (recorded as such)."""
    state = config.stash[STATE_KEY]
    if state.shard is None:
        return
    gates = [i for i in items if isinstance(i, GateTestItem)]
    # Every compiled item takes part in the assignment, also one `-k` dropped, so shards agree whatever they select.
    names = [g.name for c in state.compiled for g in c.items]
    try:
        state.shard_plan = ShardPlan.make(state.shard, names, state.shard_durations)
    except QualifyError as exc:
        raise pytest.UsageError(exc.diagnostics()) from None
    other = [i for i in gates if not state.shard_plan.owns(i.gate_item.name)]
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = [i for i in items if i not in other]


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Record each deselected gate item: it was compiled but not shown, so the run cannot be a PASS."""
    for item in items:
        if not isinstance(item, GateTestItem):
            continue
        state = item.config.stash[STATE_KEY]
        g = item.gate_item
        plan = state.shard_plan
        if plan is not None and not plan.owns(g.name):
            reason = f"{SHARD_REASON} {plan.assignment[g.name]}/{plan.spec.count}"
        else:
            reason = "deselected by " + " ".join(deselection_options(item.config) or ["a pytest option"])
        state.results.append(_item_result(item.nodeid, g, Status.DESELECTED, reason=reason))


def _item_result(nodeid: str, g: GateItem, status: Status, reason: str | None = None) -> ItemResult:
    return ItemResult(
        nodeid=nodeid,
        name=g.name,
        gate_id=g.gate_id,
        cell_id=g.cell_id,
        kind=g.kind,
        gate_file=g.gate_file.path,
        requires=list(g.requires),
        description=g.description,
        status=status,
        reason=reason,
    )


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if looks_like_gate_file(file_path):
        return GateYamlFile.from_parent(parent, path=file_path)
    return None


class GateYamlFile(pytest.File):
    def collect(self) -> Iterator[GateTestItem]:
        state = self.config.stash[STATE_KEY]
        try:
            compiled = compile_gate_file(self.path, state.registry)
        except GateFileError as exc:
            state.collect_errors.append(exc.diagnostics())
            raise self.CollectError(exc.diagnostics()) from None
        state.compiled.append(compiled)
        for gate_item in compiled.items:
            item = GateTestItem.from_parent(self, name=gate_item.name, gate_item=gate_item)
            item.add_marker(pytest.mark.gate(gate_item.kind))
            yield item


def _move_to_shared(owner: ItemResult, seconds: float) -> None:
    """A later item reused what `owner` built: those seconds were shared setup, not `owner`'s own time."""
    moved = min(seconds, owner.duration_s)
    owner.duration_s -= moved
    owner.shared_setup_s += moved


def _item_progress(config: pytest.Config, item: str) -> ItemProgress:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    quiet = reporter is None or config.get_verbosity() < 0
    tty = reporter is not None and reporter.isatty
    uncaptured = capture.global_and_fixture_disabled if capture is not None else nullcontext
    return ItemProgress(reporter, item, tty=bool(tty), quiet=quiet, uncaptured=uncaptured)


class GateTestItem(pytest.Item):
    def __init__(self, *, gate_item: GateItem, **kwargs: Any):
        super().__init__(**kwargs)
        self.gate_item = gate_item

    def runtest(self) -> None:
        state = self.config.stash[STATE_KEY]
        g = self.gate_item
        # ERROR until the run says otherwise: an item that dies mid-run must not read as passed.
        result = _item_result(self.nodeid, g, Status.ERROR)
        result.gpu = state.gpu
        state.results.append(result)
        progress = _item_progress(self.config, g.name)
        ctx = state.context
        ctx.progress, ctx.current_owner, ctx.on_shared = progress, result, _move_to_shared
        start = time.perf_counter()
        try:
            reason = state.host.skip_reason(g.requires)
            if reason:
                result.status, result.reason = Status.SKIPPED, reason
                pytest.skip(reason)
            spec = state.registry.get(g.kind)
            outcome = spec.load_runner()(g, state.context)
            result.outcome = outcome
            if outcome.measurements is not None and not isinstance(outcome.measurements, spec.measurements):
                result.reason = (
                    f"the {g.kind} runner returned {type(outcome.measurements).__name__} measurements, "
                    f"not the kind's {spec.measurements.__name__}"
                )
                # Keep the checks for the report, not measurements the schema cannot describe.
                result.outcome = replace(outcome, measurements=None)
                raise QualifyError(f"{g.name}: {result.reason}")
            if not outcome.checks:
                result.status = Status.ERROR
                result.reason = "the runner made no checks, so nothing was shown"
                raise QualifyError(f"{g.name}: {result.reason}")
            result.status, result.reason = outcome.settled_status()
            if result.status is Status.FAILED:
                raise GateCheckFailed(g.name, g.description, outcome)
        except (pytest.skip.Exception, GateCheckFailed):
            raise
        except BaseException as exc:
            if result.status is not Status.SKIPPED:
                result.status = Status.ERROR
                result.reason = result.reason or f"{type(exc).__name__}: {exc}"
                # An error raised after measuring (a blind positive control) keeps its numbers in the report.
                carried = getattr(exc, "outcome", None)
                if isinstance(carried, ItemOutcome):
                    result.outcome = carried
            raise
        finally:
            progress.close()
            ctx.current_owner = None
            result.duration_s = time.perf_counter() - start

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if not self.config.option.qualify_traceback and isinstance(excinfo.value, QualifyError):
            return excinfo.value.diagnostics()
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.gate_item.location.line - 1, f"{self.gate_item.kind}: {self.name}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE_KEY, None)
    if state is None:
        return
    state.finished_at = datetime.now(UTC)
    if state.gpu is not None:
        _hand_part_to_controller(session, state)
        return
    if state.worker_parts is not None:
        _merge_worker_parts(session, state)
        if state.strict and state.verdict is Verdict.INCOMPLETE and session.exitstatus == 0:
            session.exitstatus = 3
        return
    if state.out_dir is not None and (state.compiled or state.collect_errors):
        from qualify.report.write import write_report

        try:
            write_report(state)
        except QualifyError as exc:
            state.write_error = exc.diagnostics()
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            return
    if state.strict and state.verdict is Verdict.INCOMPLETE and session.exitstatus == 0:
        session.exitstatus = 3


def _hand_part_to_controller(session: pytest.Session, state: SessionState) -> None:
    """A worker's part of the report, and every compiled item as it would be recorded had it not run (in
    compile order, under the node id it was collected with), into its xdist `workeroutput` (JSON text: execnet
    carries plain types only)."""
    import json

    from qualify.gpu_workers import WORKER_OUTPUT_KEY
    from qualify.report.build import build_report, relative_item
    from qualify.report.paths import repository_root

    root = repository_root()
    nodeids = {r.name: r.nodeid for r in state.results}
    nodeids.update({i.gate_item.name: i.nodeid for i in session.items if isinstance(i, GateTestItem)})
    compiled = [
        relative_item(_item_result(nodeids.get(g.name, f"::{g.name}"), g, Status.ERROR).to_dict(), root)
        for c in state.compiled
        for g in c.items
    ]
    part = {"report": build_report(state, {}, signed=False, root=root), "compiled": compiled}
    session.config.workeroutput[WORKER_OUTPUT_KEY] = json.dumps(part)  # type: ignore[attr-defined]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object | None) -> None:
    """xdist controller: keep what a worker handed over (or why it went down without it)."""
    import json

    from qualify.gpu_workers import WORKER_OUTPUT_KEY

    state = node.config.stash.get(STATE_KEY, None)
    if state is None or state.worker_parts is None:
        return
    output = getattr(node, "workeroutput", None) or {}
    workerid = str(node.workerinput["workerid"])
    if WORKER_OUTPUT_KEY in output:
        state.worker_parts[workerid] = {**json.loads(output[WORKER_OUTPUT_KEY]), "exitstatus": output.get("exitstatus")}
    else:
        state.worker_parts[workerid] = {"error": str(error or "the worker handed over no report")}


def _merge_worker_parts(session: pytest.Session, state: SessionState) -> None:
    from qualify.gpu_workers import merged_report, results_from_report

    try:
        if state.out_dir is not None:
            from qualify.report.write import write_report

            write_report(state, lambda provenance, signed: merged_report(state, provenance, signed=signed))
        else:
            merged_report(state, {}, signed=False)
    except QualifyError as exc:
        state.write_error = exc.diagnostics()
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        return
    assert state.merged is not None
    state.results = results_from_report(state.merged["items"])
    state.collect_errors = list(state.merged["collect_errors"])


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is None or not (state.results or state.collect_errors):
        return
    tr = terminalreporter
    tr.section("cartridge-qualify gates")

    def primary_of(kind: str) -> Any:
        try:
            return state.registry.get(kind).primary_check
        except (KeyError, ValueError):  # an unknown kind was an error already; its items get the generic headline
            return None

    if state.results:
        for line in summary_lines(state.results, primary_of, width=max(60, config.get_terminal_writer().fullwidth)):
            tr.write_line(line)
    for err in state.collect_errors:
        tr.write_line(f"gate file error:\n{err}", red=True)
    v = state.verdict
    colour = {"green": v is Verdict.PASS, "red": v is Verdict.FAIL, "yellow": v is Verdict.INCOMPLETE}
    missing = state.unqualified_specializations
    if missing:
        tr.write_line(
            f"kernel specializations dispatched but qualified by no passing numerics item: {', '.join(missing)}",
            yellow=True,
        )
    shown = unshown_summary(state.results, len(missing))
    note = f" ({shown}: not everything was shown)" if v is Verdict.INCOMPLETE else ""
    tr.write_sep("=", f"VERDICT: {v.value}{note}", bold=True, **colour)
    if state.report_path:
        tr.write_line(f"report:   {state.report_path}")
    if state.envelope_path:
        tr.write_line(f"envelope: {state.envelope_path}")
    elif state.report_path:
        tr.write_line("envelope: none - the report is UNSIGNED (no --sign-key / QUALIFY_SIGNING_KEY)", yellow=True)
    if state.write_error:
        tr.write_line(f"report not written: {state.write_error}", red=True)


def unshown_summary(results: list[ItemResult], unqualified: int = 0) -> str:
    """How many items were not shown, by why (skipped, deselected, vacuous or underpowered), and how many
    dispatched kernel specializations no passing item qualified."""
    labels = {
        Status.SKIPPED: "skipped",
        Status.DESELECTED: "deselected",
        Status.INCOMPLETE: "vacuous or underpowered",
    }
    parts = [f"{n} {label}" for status, label in labels.items() if (n := sum(r.status is status for r in results))]
    if unqualified:
        parts.append(f"{unqualified} dispatched specialization{'s' if unqualified != 1 else ''} unqualified")
    return ", ".join(parts) or "no items"
