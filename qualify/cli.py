"""`qualify`: run, lint and list gates; make keys; verify signed reports.

Exit codes:
  0  PASS (or INCOMPLETE without --strict); lint/list/verify: OK
  1  FAIL: a gate failed or errored; verify: the envelope does not verify; render: the signature is INVALID
  2  usage error or invalid gate file
  3  INCOMPLETE (or inconclusive) under --strict: something was not shown
  4  internal error: the report could not be written
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from qualify.compile import CompiledFile, compile_gate_file, discover_gate_files, looks_like_gate_file
from qualify.errors import GateFileError, QualifyError
from qualify.failure import format_table
from qualify.mutation.cli import add_parser as add_mutants_parser
from qualify.registry import default_registry
from qualify.shards.cli import add_parser as add_merge_parser

if TYPE_CHECKING:
    import pytest

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INCOMPLETE, EXIT_INTERNAL = 0, 1, 2, 3, 4
DEFAULT_GATES_DIR = "gates"


def _default_gate_files() -> list[Path]:
    # The files directly in gates/. Its subfolders (gpu/, examples/, slow/) hold gate files that run only when named:
    # a slowed-candidate check that must fail, a smoke test that certifies nothing.
    return [f for f in sorted(Path(DEFAULT_GATES_DIR).glob("*.y*ml")) if looks_like_gate_file(f)]


def _gate_files(paths: Sequence[str]) -> list[Path]:
    files = discover_gate_files(paths) if paths else _default_gate_files()
    if not files:
        raise GateFileError(f"no gate files found in {', '.join(paths) or DEFAULT_GATES_DIR + '/'}")
    return files


def _compile_all(paths: Sequence[str]) -> tuple[list[CompiledFile], list[GateFileError]]:
    registry = default_registry()
    compiled, errors = [], []
    for f in _gate_files(paths):
        try:
            compiled.append(compile_gate_file(f, registry))
        except GateFileError as exc:
            errors.append(exc)
    return compiled, errors


def cmd_lint(args: argparse.Namespace) -> int:
    try:
        compiled, errors = _compile_all(args.files)
    except GateFileError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return EXIT_USAGE
    for err in errors:
        print(err.diagnostics(), file=sys.stderr)
    for c in compiled:
        print(f"{c.gate_file.path}: ok ({len(c.items)} items)")
    return EXIT_USAGE if errors else EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from qualify.host import detect_host

    try:
        compiled, errors = _compile_all(args.files)
    except GateFileError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return EXIT_USAGE
    for err in errors:
        print(err.diagnostics(), file=sys.stderr)
    host = detect_host()
    registry = default_registry()
    rows = []
    for c in compiled:
        for item in c.items:
            reason = host.skip_reason(item.requires)
            describe = registry.get(item.kind).load_describe()
            rows.append(
                [
                    item.name,
                    item.kind,
                    ",".join(item.requires) or "-",
                    "yes" if not reason else f"no: {reason}",
                    describe(item.params) if describe else "",
                ]
            )
    if rows:
        print(format_table(["item", "kind", "requires", "runs here", "exercises"], rows))
    print(f"host: {', '.join(sorted(host.available))}" + (f"; GPU {host.gpu_name}" if host.gpu_name else ""))
    return EXIT_USAGE if errors else EXIT_OK


def _plugin_args() -> list[str]:
    # An editable or regular install registers the plugin through its entry point; a bare source
    # checkout does not, and registering it twice would be an error.
    registered = any(ep.value == "qualify.plugin" for ep in entry_points(group="pytest11"))
    return [] if registered else ["-p", "qualify.plugin"]


class _Capture:
    def __init__(self) -> None:
        self.state = None

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from qualify.plugin import STATE_KEY

        self.state = session.config.stash.get(STATE_KEY, None)


def _preflight(args: argparse.Namespace, sign_key: str | None) -> int | None:
    """Check what writing the report needs before any gate runs (a GPU run can take hours); an exit code
    and one line on stderr if something is wrong, else None."""
    from qualify.report.write import ReportWriteError, check_output, check_report_name
    from qualify.signing.keys import load_private_key

    try:
        if args.name is not None:
            check_report_name(args.name)
        if sign_key:
            load_private_key(sign_key)  # readable, and an Ed25519 private key
    except QualifyError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return EXIT_USAGE
    try:
        check_output(Path(args.out), args.name)
    except ReportWriteError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return EXIT_INTERNAL
    return None


def _selection_args(args: argparse.Namespace) -> list[str]:
    """The item-selection options of a run (`-k`, and `-m`/`--deselect` passed through to pytest)."""
    given = [f"-k {args.k}"] if args.k else []
    extra = list(args.pytest_args)
    for i, arg in enumerate(extra):
        for flag in ("-k", "-m", "--deselect"):
            if arg == flag:
                given.append(" ".join(extra[i : i + 2]))
            elif arg.startswith(flag + ("=" if flag.startswith("--") else "")) and arg != flag:
                given.append(arg)
    return given


def _gpu_args(spec: str, per_gpu: int) -> list[str] | None:
    """pytest's options for `per_gpu` xdist workers per GPU of `spec` (the plugin refuses sharing a GPU with an item
    that may not); None (after one line on stderr) when the spec names no GPU or pytest-xdist is missing."""
    from qualify.gpu_workers import parse_gpus

    try:
        gpus = parse_gpus(spec)
    except QualifyError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return None
    if importlib.util.find_spec("xdist") is None:
        print("qualify run --gpus spreads items with pytest-xdist, which is not installed: pip install pytest-xdist",
              file=sys.stderr)  # fmt: skip
        return None
    # No restarts: a worker started in place of a crashed one would have no GPU of its own, and the crashed
    # item would run again elsewhere, its crash unrecorded.
    return ["-p", "xdist", "-n", str(len(gpus) * per_gpu), "--dist", "load", "--max-worker-restart", "0",
            "--qualify-gpus", ",".join(gpus), "--qualify-workers-per-gpu", str(per_gpu)]  # fmt: skip


def cmd_run(args: argparse.Namespace) -> int:
    import pytest

    from qualify.results import Verdict

    sign_key = args.sign_key or os.environ.get("QUALIFY_SIGNING_KEY")
    if args.strict and not sign_key:
        print(
            "qualify run --strict is a release run and refuses to finish unsigned: "
            "pass --sign-key PATH or set QUALIFY_SIGNING_KEY",
            file=sys.stderr,
        )
        return EXIT_USAGE
    selection = _selection_args(args)
    if args.strict and selection:
        # A release verdict speaks for every compiled item; a subset would sign a PASS for what never ran.
        drop = " ".join(selection)
        print(f"qualify run --strict is a release run and runs every compiled item: drop {drop}", file=sys.stderr)
        return EXIT_USAGE
    try:
        files = _gate_files(args.files)
    except GateFileError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return EXIT_USAGE
    preflight = _preflight(args, sign_key)
    if preflight is not None:
        return preflight
    if args.benchmark_json is not None and args.benchmark_json.exists():
        print(f"{args.benchmark_json}: exists already; --benchmark-json writes a new file", file=sys.stderr)
        return EXIT_INTERNAL
    pytest_args = [*_plugin_args(), *map(str, files), "--qualify-out", args.out, "-p", "no:cacheprovider"]
    pytest_args += ["-o", "python_files=", "--rootdir", str(Path.cwd())]
    if args.k:
        pytest_args += ["-k", args.k]
    if sign_key:
        pytest_args += ["--qualify-sign-key", sign_key]
    if args.strict:
        pytest_args.append("--qualify-strict")
    if args.non_release:
        pytest_args.append("--qualify-non-release")
    if args.name:
        pytest_args += ["--qualify-name", args.name]
    if args.baseline:
        pytest_args += ["--qualify-baseline", args.baseline]
    if args.shard:
        pytest_args += ["--qualify-shard", args.shard]
    if args.shard_durations:
        pytest_args += ["--qualify-shard-durations", args.shard_durations]
    if args.workers_per_gpu < 1:
        print(f"--workers-per-gpu {args.workers_per_gpu}: at least 1", file=sys.stderr)
        return EXIT_USAGE
    if args.workers_per_gpu != 1 and not args.gpus:
        print(f"qualify run --workers-per-gpu {args.workers_per_gpu}: pins workers to GPUs, give --gpus too",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    if args.gpus:
        gpu_args = _gpu_args(args.gpus, args.workers_per_gpu)
        if gpu_args is None:
            return EXIT_USAGE
        pytest_args += gpu_args
    pytest_args += ["--qualify-seed", str(args.seed), *args.pytest_args]
    capture = _Capture()
    code = pytest.main(pytest_args, plugins=[capture])
    state = capture.state
    if state is None:
        return (
            EXIT_USAGE if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.NO_TESTS_COLLECTED) else EXIT_INTERNAL
        )
    if state.write_error:
        print(f"report not written: {state.write_error}", file=sys.stderr)
        return EXIT_INTERNAL
    if state.collect_errors:
        return EXIT_USAGE
    exported = EXIT_OK
    if args.benchmark_json is not None and state.report_path:
        if any(r.kind == "perf_nonregression" and r.outcome for r in state.results):
            exported = _write_benchmark_json(Path(state.report_path), args.benchmark_json, force=False)
        else:
            print(f"{args.benchmark_json}: not written: no perf or engine item ran", file=sys.stderr)
    v = state.verdict
    if v is Verdict.FAIL:
        return EXIT_FAIL
    if v is Verdict.INCOMPLETE:
        if args.strict:
            return EXIT_INCOMPLETE
        print(
            "\n*** VERDICT: INCOMPLETE - items were skipped, deselected, vacuous or underpowered; NOT a pass. ***\n"
            "*** Use --strict to make this a failing exit code.                                             ***",
            file=sys.stderr,
        )
    # The verdict stands; a requested export that could not be written is still not a clean exit.
    return EXIT_INTERNAL if exported != EXIT_OK else EXIT_OK


def cmd_keygen(args: argparse.Namespace) -> int:
    from qualify.signing.keys import generate_keypair

    paths = generate_keypair(args.out)
    print(f"private key: {paths.private} (mode 0600; keep it secret)")
    print(f"public key:  {paths.public}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from qualify.signing import verify_envelope_file
    from qualify.signing.intoto import MUTATION_PREDICATE_TYPE

    try:
        verified = verify_envelope_file(args.envelope, args.key, subject_file=args.subject)
    except QualifyError as exc:
        print(f"INVALID: {exc.diagnostics()}", file=sys.stderr)
        return EXIT_FAIL
    predicate = verified.statement.predicate
    subjects = verified.statement.subject
    print(f"OK: {args.envelope} is signed by {args.key}")
    what = (
        f"mutation score: {predicate.get('score')}"
        if verified.statement.predicate_type == MUTATION_PREDICATE_TYPE
        else f"release: {predicate.get('release', {}).get('is_release')}"
    )
    print(
        f"verdict: {predicate.get('verdict')}  {what}  subjects: {len(subjects)}"
        + ("" if args.verbose else " (-v lists them)")
    )
    if args.verbose:
        for s in subjects:
            print(f"  subject {s.digest.sha256}  {s.name}")
    if args.subject:
        print(f"subject file {args.subject} matches a signed digest")
    return EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    from qualify.render.command import RenderRequest, infer_format, run_render

    output = Path(args.output) if args.output else None
    request = RenderRequest(
        source=Path(args.input),
        output=output,
        format=infer_format(output, args.format),
        key=Path(args.key) if args.key else None,
        force=args.force,
    )
    return run_render(request)


# -- measurement tools: serving agreement, the engine table, lm-eval with qualify-kv (bodies in their modules) --
def cmd_serve_agreement(args: argparse.Namespace) -> int:
    from qualify.serve import e2e

    if args.step == "generate":
        if args.out.exists():
            print(f"{args.out}: exists already; generate writes a new record", file=sys.stderr)
            return EXIT_USAGE
        try:
            workload = e2e.workload_for(
                model_dir=args.model_dir, cartridge=args.cartridge, eval_set=args.eval_set, prompts=args.prompts,
                question_len=args.question_len, cartridge_len=args.cartridge_len, seed=args.seed,
            )  # fmt: skip
        except QualifyError as exc:
            print(exc.diagnostics(), file=sys.stderr)
            return EXIT_USAGE
        if args.gpu_memory_utilization is not None:
            if args.model_dir is None:
                print("--gpu-memory-utilization: only with --model-dir (whose KV cache has a fixed size)",
                      file=sys.stderr)  # fmt: skip
                return EXIT_USAGE
            share = {"gpu_memory_utilization": args.gpu_memory_utilization}
            workload = dataclasses.replace(workload, settings=workload.settings.model_copy(update=share))
        e2e.generate(args.layout, args.out, workload, max_tokens=args.max_tokens, seed=args.seed, eager=args.eager,
                     kernel_launch=args.kernel_launch, kv_cache_layout=args.kv_cache_layout)  # fmt: skip
        return EXIT_OK
    return e2e.compare_command(
        args.reference, args.candidate, tie_eps=args.tie_eps, logprob_tolerance=args.logprob_tolerance
    )


def cmd_serve_loss(args: argparse.Namespace) -> int:
    from qualify.serve import prompt_scores

    if args.step in ("compare", "boolq"):
        from qualify.loss.data import load_eval_set
        from qualify.serve.yes_no import floor_report, yes_no_outcomes

        where = args.reference
        try:
            ref = json.loads(args.reference.read_text())
            if args.step == "boolq":
                items = load_eval_set(args.eval_set).items
                ref_outcomes = yes_no_outcomes(ref, items)
            rows = {}
            for where in args.layouts:
                doc = json.loads(where.read_text())
                rows[str(where)] = (
                    prompt_scores.compare_scores(ref, doc, n_resamples=args.resamples, confidence=args.confidence)
                    if args.step == "compare"
                    else floor_report(ref_outcomes, yes_no_outcomes(doc, items))
                )
        except (OSError, ValueError, KeyError, TypeError, QualifyError) as exc:
            detail = exc.diagnostics() if isinstance(exc, QualifyError) else f"{type(exc).__name__}: {exc}"
            print(f"serve-loss {args.step}: {where}: {detail}", file=sys.stderr)
            return EXIT_USAGE
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    if args.out.exists():
        print(f"{args.out}: exists already; score writes a new record", file=sys.stderr)
        return EXIT_USAGE
    from qualify.serve.e2e import real_model_settings

    try:
        settings = real_model_settings(args.model_dir).model_copy(update={"enforce_eager": args.eager})
        if args.gpu_memory_utilization is not None:
            settings = settings.model_copy(update={"gpu_memory_utilization": args.gpu_memory_utilization})
        prompt_scores.score(args.layout, args.out, settings=settings, cartridge_file=args.cartridge,
                            eval_set=args.eval_set, fake_quant=args.fake_quant, scaling=args.scaling, top_k=args.top_k,
                            seed=args.seed)  # fmt: skip
    except QualifyError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def cmd_serve_summary(args: argparse.Namespace) -> int:
    from qualify.perf.serve_tables import summary_command

    return summary_command(args.runs_dir, args.out)


def _write_benchmark_json(report_path: Path, out: Path, *, force: bool) -> int:
    """pytest-benchmark JSON of a plain report's perf items at `out`; exit code and one line on any problem."""
    from qualify.json_limits import read_bounded, strict_loads
    from qualify.kinds.perf_nonregression.benchmark_json import benchmark_document

    try:
        report = strict_loads(read_bounded(report_path))
        document = benchmark_document(report if isinstance(report, dict) else {})
    except ImportError as exc:  # a venv built without the project's dependencies
        print(f"{report_path}: no benchmark JSON: {exc.name or exc} is not installed", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError, QualifyError) as exc:
        print(f"{report_path}: no benchmark JSON: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with out.open("w" if force else "x", encoding="utf-8") as fh:
            json.dump(document, fh, indent=1, sort_keys=True)
    except FileExistsError:
        print(f"{out}: exists already; choose another path (benchmark-json: or pass --force)", file=sys.stderr)
        return EXIT_INTERNAL
    except OSError as exc:
        print(f"{out}: cannot write benchmark JSON: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_INTERNAL
    print(f"{out}: {len(document['benchmarks'])} benchmarks (pytest-benchmark JSON, seconds per round)")
    return EXIT_OK


def cmd_benchmark_json(args: argparse.Namespace) -> int:
    return _write_benchmark_json(args.report, args.output, force=args.force)


def cmd_perf_summary(args: argparse.Namespace) -> int:
    from qualify.kinds.perf_nonregression.summary import summarize

    if len(args.reports) > 2:
        print("qualify perf-summary takes one or two reports", file=sys.stderr)
        return EXIT_USAGE
    return summarize(args.reports)


def cmd_lm_eval(args: argparse.Namespace) -> int:
    from qualify.accuracy.lm_eval_cli import run_lm_eval

    return run_lm_eval(args.lm_eval_args)


def _unit_share(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"a share of the GPU in (0, 1], got {text}")
    return value


def _add_measurement_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from qualify.serve.config import DEFAULT_KERNEL_LAUNCH, KERNEL_LAUNCHES, KV_CACHE_LAYOUTS
    from qualify.serve.layouts import LAYOUTS

    agree = sub.add_parser(
        "serve-agreement", help="greedy tokens of one vLLM serving layout, or the agreement of two (needs vLLM)"
    )
    steps = agree.add_subparsers(dest="step", required=True)
    gen = steps.add_parser("generate", help="serve the fixed prompts in one layout; write tokens and log-probs")
    gen.add_argument("--layout", required=True, choices=sorted(LAYOUTS))
    gen.add_argument("--out", required=True, type=Path)
    gen.add_argument("--prompts", type=int, default=8)
    gen.add_argument("--question-len", type=int, default=48)
    gen.add_argument("--max-tokens", type=int, default=32)
    gen.add_argument("--cartridge-len", type=int, default=632)
    gen.add_argument("--seed", type=int, default=1234)
    gen.add_argument("--eager", action="store_true", help="eager mode (default: torch.compile with CUDA graphs)")
    gen.add_argument("--kernel-launch", choices=KERNEL_LAUNCHES, default=DEFAULT_KERNEL_LAUNCH,
                     help="shared layouts: how the fused backend launches (ServingConfig.kernel_launch)")  # fmt: skip
    gen.add_argument("--kv-cache-layout", choices=KV_CACHE_LAYOUTS, default=None,
                     help="ask vLLM for this KV cache layout (VLLM_KV_CACHE_LAYOUT; default: the environment's, else "
                          "vLLM's NHD); the record names the layout and prefill the fused backend saw")  # fmt: skip
    gen.add_argument("--model-dir", help="a real model's Hugging Face folder (relative: under the repository root; "
                     "default: the seeded small Qwen3, random questions of --question-len, a random cartridge of "
                     "--cartridge-len; with it the eval set's questions and the cartridge's own length)")  # fmt: skip
    gen.add_argument("--cartridge", type=Path, help="with --model-dir: the trained cartridge to serve")
    gen.add_argument("--eval-set", type=Path, help="with --model-dir: the eval set whose questions are sent")
    gen.add_argument("--gpu-memory-utilization", type=_unit_share, metavar="(0,1]",
                     help="with --model-dir (a fixed KV cache): the share of the GPU vLLM checks is free at start-up, "
                          "so that engines side by side each ask for a part")  # fmt: skip
    cmp = steps.add_parser("compare", help="token identity (or a log-prob tolerance); exit 1 when it fails")
    cmp.add_argument("reference", type=Path)
    cmp.add_argument("candidate", type=Path)
    cmp.add_argument("--tie-eps", type=float, default=0.1)
    cmp.add_argument("--logprob-tolerance", type=float, default=None)
    agree.set_defaults(func=cmd_serve_agreement)

    loss = sub.add_parser("serve-loss", help="eval-set answer loss of one vLLM serving layout, or the comparison")
    loss_steps = loss.add_subparsers(dest="step", required=True)
    score = loss_steps.add_parser("score", help="prompt log-probabilities of every eval item's answer in one layout")
    score.add_argument("--layout", required=True, choices=sorted(LAYOUTS))
    score.add_argument("--out", required=True, type=Path)
    score.add_argument("--model-dir", required=True, help="the real model's folder (relative: to the repository)")
    score.add_argument("--cartridge", required=True, type=Path)
    score.add_argument("--eval-set", required=True, type=Path)
    score.add_argument("--fake-quant", choices=["K16/V8", "K8/V16", "K8/V8", "K4/V16"],
                       help="inject layouts: quantize the cartridge first (K4/V16: the positive control)")  # fmt: skip
    score.add_argument("--scaling", choices=["none", "per_tensor", "per_head"], default="none",
                       help="with --fake-quant: the FP8/FP4 scaling (the loss gate's `scaling`)")  # fmt: skip
    score.add_argument("--top-k", type=int, default=20, choices=range(1, 21), metavar="1..20",
                       help="top-k per position (vLLM's max_logprobs is 20)")  # fmt: skip
    score.add_argument("--seed", type=int, default=0)
    score.add_argument("--eager", action="store_true", help="eager mode (default: torch.compile with CUDA graphs)")
    score.add_argument("--gpu-memory-utilization", type=_unit_share, metavar="(0,1]",
                       help="the share of the GPU vLLM checks is free at start-up (the KV cache has a fixed size, so "
                            "engines side by side each ask for a part)")  # fmt: skip
    lcmp = loss_steps.add_parser("compare", help="each layout's loss against the reference's, paired over items")
    lcmp.add_argument("reference", type=Path)
    lcmp.add_argument("layouts", type=Path, nargs="+")
    lcmp.add_argument("--resamples", type=int, default=2000)
    lcmp.add_argument("--confidence", type=float, default=0.95)
    boolq = loss_steps.add_parser("boolq", help="the yes/no questions' accuracy floor of each layout (with power)")
    boolq.add_argument("reference", type=Path)
    boolq.add_argument("layouts", type=Path, nargs="+")
    boolq.add_argument("--eval-set", required=True, type=Path)
    loss.set_defaults(func=cmd_serve_loss)

    summary = sub.add_parser("serve-summary", help="engine and serving tables of a folder of per-layout runs")
    summary.add_argument("runs_dir", type=Path, metavar="RUNS_DIR", help="<layout>.p<process>.json files")
    summary.add_argument("--out", type=Path, help="also write the tables' rows as JSON")
    summary.set_defaults(func=cmd_serve_summary)

    perf_summary = sub.add_parser(
        "perf-summary",
        help="the perf comparison table of a report; of two, also the run-to-run check (exit 1 when inconsistent)",
    )
    perf_summary.add_argument("reports", nargs="+", type=Path, metavar="REPORT", help="plain report JSON (one or two)")
    perf_summary.set_defaults(func=cmd_perf_summary)

    bench = sub.add_parser(
        "benchmark-json",
        help="a report's perf and engine samples as pytest-benchmark JSON (for `pytest-benchmark compare`)",
    )
    bench.add_argument("report", type=Path, metavar="REPORT", help="plain report JSON")
    bench.add_argument("-o", "--output", type=Path, required=True, metavar="PATH")
    bench.add_argument("--force", action="store_true", help="replace PATH if it exists")
    bench.set_defaults(func=cmd_benchmark_json)

    lm_eval = sub.add_parser(
        "lm-eval",
        help="lm-eval's command line with the qualify-kv model registered",
        description="Passes everything after `lm-eval` to lm-eval's command line (its subcommand first: "
        "run, ls, validate), with `--model qualify-kv` available.",
    )
    lm_eval.add_argument("lm_eval_args", nargs=argparse.REMAINDER, metavar="COMMAND [ARGS]")
    lm_eval.set_defaults(func=cmd_lm_eval)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qualify",
        description="Qualification gates for shared KV-cache cartridges and the fused cartridge attention kernel.",
        epilog=__doc__.split("\n", 2)[2] + "\nArguments after `--` are passed to pytest.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run gates and write a (signed) report")
    run.add_argument(
        "files", nargs="*", help=f"gate files or folders (default: every gate file under {DEFAULT_GATES_DIR}/)"
    )
    run.add_argument("-k", metavar="EXPR", help="select items by pytest -k expression")
    run.add_argument("--out", default="reports", help="report folder (default: reports)")
    run.add_argument("--sign-key", metavar="PATH", help="Ed25519 private key (PEM); default $QUALIFY_SIGNING_KEY")
    run.add_argument("--strict", action="store_true", help="release run: require a key; INCOMPLETE exits 3")
    run.add_argument("--non-release", action="store_true", help="mark the report as a development run")
    run.add_argument("--name", help="report file name stem")
    run.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    run.add_argument(
        "--baseline", metavar="PATH.dsse.json", help="signed report of the last release to compare against"
    )
    run.add_argument("--shard", metavar="K/N", help="run shard K of N of the compiled items (a shard report)")
    run.add_argument(
        "--shard-durations", metavar="REPORT.json", help="balance the shards by a previous report's item durations"
    )
    run.add_argument(
        "--gpus",
        metavar="auto|N|0,1",
        help="spread the items over these GPUs, one pytest-xdist worker pinned to each (CUDA_VISIBLE_DEVICES); "
        "items sharing run-wide state run in one worker; one merged report",
    )
    run.add_argument(
        "--workers-per-gpu",
        type=int,
        default=1,
        metavar="N",
        help="with --gpus: N workers pinned to each GPU, for gate files whose kinds may share one (kernel_numerics: "
        "correctness only; refused where an item is timed)",
    )
    run.add_argument(
        "--benchmark-json",
        type=Path,
        metavar="PATH",
        help="also write the perf and engine samples as pytest-benchmark JSON (a new file)",
    )
    run.set_defaults(func=cmd_run)

    add_mutants_parser(sub)
    add_merge_parser(sub)

    lint = sub.add_parser("lint", help="validate gate files (exit 2 on any error)")
    lint.add_argument("files", nargs="*")
    lint.set_defaults(func=cmd_lint)

    lst = sub.add_parser("list", help="list compiled items, their requirements and whether this host can run them")
    lst.add_argument("files", nargs="*")
    lst.set_defaults(func=cmd_list)

    keygen = sub.add_parser("keygen", help="write an Ed25519 signing key pair")
    keygen.add_argument(
        "--out", required=True, metavar="DIR", help="writes DIR/signing-key.pem and DIR/signing-key.pub.pem"
    )
    keygen.set_defaults(func=cmd_keygen)

    verify = sub.add_parser("verify", help="verify a signed report envelope (exit 0 valid, 1 invalid)")
    verify.add_argument("envelope")
    verify.add_argument("--key", required=True, metavar="PUB", help="public key (PEM)")
    verify.add_argument("--subject", metavar="FILE", help="also check that FILE's sha256 is a signed subject")
    verify.add_argument("-v", "--verbose", action="store_true", help="list every signed subject and its sha256")
    verify.set_defaults(func=cmd_verify)

    render = sub.add_parser(
        "render", help="render a signed report (or a plain report .json) as self-contained HTML or Markdown"
    )
    render.add_argument("input", metavar="ENVELOPE", help="the .dsse.json envelope, or a plain report .json (UNSIGNED)")
    render.add_argument("-o", "--output", metavar="FILE", help="output file (default: standard output)")
    render.add_argument("--format", choices=["html", "md"], help="default: md for a .md output, else html")
    render.add_argument("--key", metavar="PUB", help="public key (PEM) to check the envelope's signature with")
    render.add_argument("--force", action="store_true", help="replace FILE if it exists")
    render.set_defaults(func=cmd_render)
    _add_measurement_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after `--` goes to pytest untouched (e.g. `qualify run -- -x -vv`).
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    args.pytest_args = extra
    try:
        return int(args.func(args))
    except QualifyError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
