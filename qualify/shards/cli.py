"""`qualify merge SHARD.dsse.json... --key PUB`: one signed report from the shard reports of one run.

Exit codes as `qualify run`: 0 PASS (or INCOMPLETE without --strict), 1 FAIL, 2 the shards do not make up one
run (missing, duplicated, mismatched, or not verifying), 3 INCOMPLETE under --strict, 4 the report could not be
written. Nothing is written unless every shard checks out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qualify.errors import QualifyError

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INCOMPLETE, EXIT_INTERNAL = 0, 1, 2, 3, 4


def add_parser(sub: Any) -> None:
    p = sub.add_parser("merge", help="merge the signed shard reports of one run into one signed report")
    p.add_argument("shards", nargs="+", type=Path, metavar="SHARD.dsse.json")
    p.add_argument(
        "--key", required=True, type=Path, action="append", metavar="PUB",
        help="public key a shard was signed with; repeat it for shards signed on runners with their own keys",
    )  # fmt: skip
    p.add_argument("--out", default="reports", help="report folder (default: reports)")
    p.add_argument("--name", help="report file name stem (default: merged-<UTC time>)")
    p.add_argument("--sign-key", metavar="PATH", help="Ed25519 private key (PEM); default $QUALIFY_SIGNING_KEY")
    p.add_argument("--strict", action="store_true", help="release merge: require a key; INCOMPLETE exits 3")
    p.add_argument("--non-release", action="store_true", help="mark the merged report as a development run")
    p.set_defaults(func=cmd_merge)


def cmd_merge(args: argparse.Namespace) -> int:
    from qualify.report.provenance import collect_provenance
    from qualify.report.write import check_output, check_report_name, write_new
    from qualify.shards.merge import check_shards, load_shard, merge_reports
    from qualify.signing import Subject, sign_report
    from qualify.signing.keys import load_private_key

    started = datetime.now(UTC)
    sign_key = args.sign_key or os.environ.get("QUALIFY_SIGNING_KEY")
    if args.strict and not sign_key:
        print("qualify merge --strict is a release merge and refuses to finish unsigned: pass --sign-key",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        shards = [load_shard(p, args.key) for p in args.shards]
        check_shards(shards)
        name = args.name or f"merged-{started.strftime('%Y%m%dT%H%M%SZ')}"
        check_report_name(name)
        private_key = load_private_key(sign_key) if sign_key else None
        out = Path(args.out)
        check_output(out, name)
    except QualifyError as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return EXIT_USAGE
    provenance = collect_provenance(sys.argv, Path.cwd(), started, datetime.now(UTC), sign_key=sign_key)
    report = merge_reports(
        shards, provenance=provenance.model_dump(mode="json"), strict=args.strict, signed=private_key is not None,
        non_release=args.non_release,
    )  # fmt: skip
    report_path, envelope_path = out / f"{name}.json", out / f"{name}.dsse.json"
    try:
        if private_key is None:
            write_new(report_path, json.dumps(report, indent=2, sort_keys=True).encode() + b"\n")
        else:
            subjects = [Subject.for_file(s.path, "shard:" + s.path.name) for s in shards]
            report_bytes, envelope = sign_report(report, subjects, private_key, report_name=report_path.name)
            write_new(report_path, report_bytes)
            write_new(envelope_path, envelope)
    except QualifyError as exc:
        print(f"merged report not written: {exc.diagnostics()}", file=sys.stderr)
        return EXIT_INTERNAL
    c = report["counts"]
    print(f"merged {len(shards)} shards: {c['total']} items, {c['passed']} passed, {c['failed']} failed, "
          f"{c['error']} errors, {c['skipped']} skipped, {c['deselected']} deselected, "
          f"{c['incomplete']} incomplete")  # fmt: skip
    print(f"VERDICT: {report['verdict']}")
    print(f"report:   {report_path}" + (f"\nenvelope: {envelope_path}" if private_key else " (unsigned)"))
    if report["verdict"] == "FAIL":
        return EXIT_FAIL
    if report["verdict"] == "INCOMPLETE" and args.strict:
        return EXIT_INCOMPLETE
    return EXIT_OK
