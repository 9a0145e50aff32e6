"""`qualify mutants`: run the numerics gate against every mutant of the catalog and sign the result.

Exit codes: 0 PASS (every mutant killed or argued equivalent), 1 FAIL (a survivor, a contradicted equivalence,
or the gate fails the unmutated kernel), 2 usage or catalog errors, 3 INCOMPLETE (inconclusive or broken runs),
4 the report could not be written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qualify.errors import QualifyError
from qualify.hashing import sha256_file
from qualify.mutation.catalog import LoadedCatalog, Mutant, load_catalog
from qualify.mutation.execute import ChildRun, GateItemRef, MutantStatus, items_expression, run_child
from qualify.mutation.materialize import materialize, tree_sha256
from qualify.mutation.report import build_mutation_report, markdown_table, mutant_row
from qualify.report.paths import as_reported

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INCOMPLETE, EXIT_INTERNAL = 0, 1, 2, 3, 4
BASELINE_NAME = "unmutated"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "mutants",
        help="run the numerics gate against each mutant of a catalog; write a signed mutation report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("catalog", nargs="?", default="mutation/cartridge_attn.yaml", help="mutant catalog (YAML)")
    p.add_argument("--gate", action="append", metavar="FILE", help="gate file(s) instead of the catalog's `gate`")
    p.add_argument("--only", metavar="IDS", help="comma-separated mutant ids (default: all)")
    p.add_argument("--interpreter-only", action="store_true", help="only mutants marked `interpreter: true`")
    p.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    p.add_argument("--timeout-s", type=float, default=1200.0, help="per child run (default 1200)")
    p.add_argument("--all-items", action="store_true", help="run every item per mutant instead of stopping at a kill")
    p.add_argument(
        "--unmutated", choices=("whole-gate", "killing-items"), default="whole-gate",
        help="what the unmutated copy runs: the whole gate beside the mutants (default), or after them only the "
        "items that killed one (each kill stands only if that item passes the unmutated kernel: the same score "
        "from a fraction of the gate, but no verdict on the items no mutant reached, which the numerics run of "
        "the unmutated kernel must give)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="reports", help="output folder (default: reports)")
    p.add_argument("--name", help="report name stem (default: mutation-<UTC time>)")
    p.add_argument("--sign-key", metavar="PATH", help="Ed25519 private key (PEM); default $QUALIFY_SIGNING_KEY")
    p.set_defaults(func=cmd_mutants)


def _select(loaded: LoadedCatalog, args: argparse.Namespace) -> list[Mutant]:
    ids = [i.strip() for i in args.only.split(",") if i.strip()] if args.only else None
    chosen = loaded.catalog.select(ids)
    if args.interpreter_only:
        chosen = [m for m in chosen if m.interpreter]
    if not chosen:
        raise QualifyError("no mutant selected")
    return chosen


def _one(
    target: Path,
    mutant: Mutant | None,
    gates: list[Path],
    children: Path,
    args: argparse.Namespace,
    cwd: Path,
    only_items: list[GateItemRef] | None = None,
    name: str | None = None,
) -> tuple[ChildRun, str | None]:
    with tempfile.TemporaryDirectory(prefix="qualify-mutant-") as tmp:
        copy = materialize(target, Path(tmp), mutant)
        run = run_child(
            copy, gates, children, name or (mutant.id if mutant else BASELINE_NAME), cwd=cwd, seed=args.seed,
            timeout_s=args.timeout_s, stop_at_first_failure=not args.all_items, only_items=only_items,
        )  # fmt: skip
    return run, copy.edited_sha256


def killing_items(runs: dict[str, tuple[ChildRun, str | None]]) -> list[GateItemRef] | None:
    """Every item that killed a mutant, when one -k expression can select them all; None otherwise (no kill, or a
    name no expression can hold), when the unmutated copy must run the whole gate."""
    refs = sorted({GateItemRef(k.get("nodeid") or k["item"], k["item"]) for run, _ in runs.values()
                   for k in run.killed_by})  # fmt: skip
    return refs if items_expression([r.name for r in refs]) is not None else None


def _retry_alone(
    runs: dict[str, tuple[ChildRun, str | None]],
    mutants: list[Mutant],
    target: Path,
    gates: list[Path],
    children: Path,
    args: argparse.Namespace,
    cwd: Path,
) -> dict[str, ChildRun]:
    """Runs again, one at a time with nothing beside them, the children that an item out of GPU memory left
    inconclusive while they shared the GPU (results/2026-12-07-gluon-persistent-cut-h100 did so by hand); returns
    their first runs, which the report keeps beside the second (`retried_alone`)."""
    by_id = {m.id: m for m in mutants}
    first: dict[str, ChildRun] = {}
    for ident, (run, _) in list(runs.items()):
        if run.status is MutantStatus.INCONCLUSIVE and run.out_of_memory:
            first[ident] = run
            runs[ident] = _one(target, by_id.get(ident), gates, children, args, cwd, name=f"{ident}.alone")
            print(f"alone, after running out of GPU memory: {_line(1, 1, ident, runs[ident][0])}", flush=True)
    return first


def _line(done: int, total: int, ident: str, run: ChildRun) -> str:
    first = run.killed_by[0]["item"] if run.killed_by else run.reason[:100]
    return f"[{done}/{total}] {run.status.value:<12} {ident:<40} {run.wall_s:7.1f} s  {first}"


def cmd_mutants(args: argparse.Namespace) -> int:
    from qualify.report.provenance import collect_provenance
    from qualify.report.write import check_output, check_report_name, write_new
    from qualify.signing import Subject, sign_report
    from qualify.signing.intoto import MUTATION_PREDICATE_TYPE
    from qualify.signing.keys import load_private_key

    started = datetime.now(UTC)
    try:
        loaded = load_catalog(args.catalog)
        mutants = _select(loaded, args)
        if args.jobs < 1:
            raise QualifyError("--jobs must be at least 1")
        name = args.name or f"mutation-{started.strftime('%Y%m%dT%H%M%SZ')}"
        check_report_name(name)
        root = loaded.root
        target = root / loaded.catalog.target
        gates = [Path(g).resolve() for g in args.gate] if args.gate else [root / g for g in loaded.catalog.gate]
        missing = [str(g) for g in gates if not g.is_file()]
        if missing:
            raise QualifyError(f"no such gate file: {', '.join(missing)}")
        # Every edit must apply before anything runs or is written: a stale catalog is a usage error.
        with tempfile.TemporaryDirectory(prefix="qualify-mutant-check-") as tmp:
            for m in mutants:
                materialize(target, Path(tmp) / m.id, m)
        sign_key = args.sign_key or os.environ.get("QUALIFY_SIGNING_KEY")
        private_key = load_private_key(sign_key) if sign_key else None
        out = Path(args.out)
        check_output(out, name)
        children = out / f"{name}.children"
        children.mkdir()
    except (QualifyError, FileExistsError) as exc:
        detail = exc.diagnostics() if isinstance(exc, QualifyError) else f"{exc.filename}: exists already"
        print(f"{args.catalog}: {detail}", file=sys.stderr)
        return EXIT_USAGE
    cwd = Path.cwd()
    against = ", ".join(as_reported(str(g), cwd) for g in gates)
    print(f"{len(mutants)} mutants of {loaded.catalog.target} against {against}")
    # The unmutated copy runs beside the mutants rather than first: its verdict decides the report's, and a
    # release host's time is better spent running all of them at once. With --unmutated killing-items it runs
    # after them, only what killed one: a kill counts only if the killing item passes the unmutated kernel.
    after = args.unmutated == "killing-items"
    runs: dict[str, tuple[ChildRun, str | None]] = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {} if after else {pool.submit(_one, target, None, gates, children, args, cwd): None}
        futures.update({pool.submit(_one, target, m, gates, children, args, cwd): m for m in mutants})
        for done, fut in enumerate(as_completed(futures)):
            m = futures[fut]
            ident = m.id if m else BASELINE_NAME
            runs[ident] = fut.result()
            line = _line(done, len(mutants), ident, runs[ident][0])
            print(line.replace("] survived", "] passed  ", 1) if m is None else line, flush=True)
    # With --jobs 1 a child shared the GPU with nothing: running it again alone would show nothing new.
    first_runs = _retry_alone(runs, mutants, target, gates, children, args, cwd) if args.jobs > 1 else {}
    baseline_items = None
    if after:
        baseline_items = killing_items(runs)
        scope = f"the {len(baseline_items)} items that killed a mutant" if baseline_items else "the whole gate"
        print(f"unmutated copy: {scope}", flush=True)
        runs[BASELINE_NAME] = _one(target, None, gates, children, args, cwd, baseline_items)
        line = _line(len(mutants), len(mutants), BASELINE_NAME, runs[BASELINE_NAME][0])
        print(line.replace("] survived", "] passed  ", 1), flush=True)
    baseline = runs.pop(BASELINE_NAME)[0]
    if baseline.status.value == "inconclusive":
        print(f"the unmutated kernel's run showed nothing ({baseline.reason}): the mutation score means nothing",
              file=sys.stderr)  # fmt: skip
    elif baseline.status.value != "survived":
        print("the gate does not pass the unmutated kernel: the mutation score means nothing", file=sys.stderr)
    rows = [mutant_row(m, *runs[m.id], first_runs.get(m.id)) for m in mutants if m.id in runs]
    finished = datetime.now(UTC)
    provenance = collect_provenance(sys.argv, cwd, started, finished, sign_key=sign_key).model_dump(mode="json")
    report = build_mutation_report(
        loaded,
        target_tree_sha256=tree_sha256(target),
        gate_files=[(as_reported(str(g), cwd), sha256_file(g)) for g in gates],
        baseline=baseline,
        baseline_first_run=first_runs.get(BASELINE_NAME),
        baseline_items=None if baseline_items is None else [i.nodeid for i in baseline_items],
        rows=rows,
        seed=args.seed,
        stop_at_first_failure=not args.all_items,
        provenance=provenance,
        catalog_path=as_reported(args.catalog, cwd),
    )
    report_path, envelope_path = out / f"{name}.json", out / f"{name}.dsse.json"
    try:
        if private_key is None:
            write_new(report_path, json.dumps(report, indent=2, sort_keys=True).encode() + b"\n")
        else:
            subjects = [Subject.for_file(Path(args.catalog), "catalog:" + Path(args.catalog).name)]
            subjects += [Subject.for_file(g, "gate:" + g.name) for g in gates]
            subjects += [Subject.for_file(c, "child-report:" + c.name) for c in sorted(children.glob("*.json"))]
            report_bytes, envelope = sign_report(
                report, subjects, private_key, report_name=report_path.name, predicate_type=MUTATION_PREDICATE_TYPE
            )
            write_new(report_path, report_bytes)
            write_new(envelope_path, envelope)
    except QualifyError as exc:
        print(f"mutation report not written: {exc.diagnostics()}", file=sys.stderr)
        return EXIT_INTERNAL
    print()
    print(markdown_table(report))
    print(f"report:   {report_path}" + (f"\nenvelope: {envelope_path}" if private_key else " (unsigned)"))
    return {"PASS": EXIT_OK, "FAIL": EXIT_FAIL}.get(report["verdict"], EXIT_INCOMPLETE)
