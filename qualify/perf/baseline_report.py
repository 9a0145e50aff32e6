"""The baseline of a `baseline: release` gate: the same candidate's samples in a signed earlier report.

The envelope's signature is verified before anything in it is read; the samples come from the verified
statement's predicate (the report itself), never from the unsigned plain copy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from qualify.errors import QualifyError
from qualify.signing import verify_envelope_file
from qualify.signing.intoto import PREDICATE_TYPE

PUBLIC_KEY_ENV = "QUALIFY_BASELINE_PUBLIC_KEY"


def public_key_path(gate_value: Path | None) -> Path:
    """The gate's `baseline_public_key` if set, else $QUALIFY_BASELINE_PUBLIC_KEY."""
    if gate_value is not None:
        return gate_value
    env = os.environ.get(PUBLIC_KEY_ENV)
    if not env:
        raise QualifyError(
            f"a release baseline must be verified before use: set the gate's baseline_public_key or ${PUBLIC_KEY_ENV}"
        )
    return Path(env)


def load_verified_report(envelope: Path, public_key: Path) -> dict[str, Any]:
    """The report inside `envelope`, after its signature verifies with `public_key`; QualifyError otherwise."""
    try:
        verified = verify_envelope_file(envelope, public_key)
    except QualifyError as exc:
        raise QualifyError(f"baseline report {envelope} does not verify: {exc.diagnostics()}") from exc
    predicate = verified.statement.predicate
    if verified.statement.predicate_type != PREDICATE_TYPE:
        raise QualifyError(
            f"baseline report {envelope} is a {verified.statement.predicate_type}, not a qualification report"
        )
    if not isinstance(predicate, dict) or not isinstance(predicate.get("items"), list):
        raise QualifyError(f"baseline report {envelope}: the signed statement holds no qualification report")
    return predicate


def find_candidate_cell(report: dict[str, Any], source: Path, want: dict[str, Any]) -> dict[str, Any]:
    """Measurements of the earlier run's perf item whose candidate cell matches `want` (see `find_candidate_item`)."""
    return find_candidate_item(report, source, want).get("measurements") or {}


def baseline_dispatches(item: dict[str, Any]) -> list[str]:
    """The kernel specializations a baseline report's item dispatched (report format 3; none before it)."""
    spec = item.get("specializations")
    got = spec.get("dispatched") if isinstance(spec, dict) else None
    return [s for s in got if isinstance(s, str)] if isinstance(got, list) else []


def find_candidate_item(report: dict[str, Any], source: Path, want: dict[str, Any]) -> dict[str, Any]:
    """The earlier run's perf item whose candidate cell matches `want` on every key.

    `want` holds implementation_set, candidate, candidate_options, shape, metric, batch and suffix: the
    same implementation with the same options on the same shapes, so that the ratio compares like with like.
    """
    for item in report["items"]:
        m = item.get("measurements") or {}
        if item.get("kind") != "perf_nonregression" or not m.get("candidate_samples"):
            continue
        if all(m.get(k) == v for k, v in want.items()):
            return item
    keys = ", ".join(f"{k}={v}" for k, v in want.items() if k not in ("shape", "candidate_options"))
    raise QualifyError(
        f"baseline report {source} has no measured perf cell for {keys} with the same shape set and options"
    )
