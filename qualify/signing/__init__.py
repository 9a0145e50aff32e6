"""Signed qualification reports: a DSSE envelope around an in-toto Statement whose predicate is the report.

The envelope is the only trusted form. The plain report JSON written next to it is for people and
tools; it is itself a subject of the statement, so `verify_envelope_file(..., subject_file=report)`
proves the plain copy is the one that was signed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from qualify.errors import SigningError
from qualify.hashing import sha256_file
from qualify.json_limits import TooLarge, canonical_json, read_bounded
from qualify.signing import dsse
from qualify.signing.dsse import VerifiedStatement
from qualify.signing.intoto import PREDICATE_TYPE, PredicateType, Subject, build_statement
from qualify.signing.keys import load_public_key

__all__ = [
    "REPORT_SUBJECT_NAME",
    "SigningError",
    "Subject",
    "VerifiedStatement",
    "sign_report",
    "verify_envelope_file",
]

REPORT_SUBJECT_NAME = "qualification-report.json"


def sign_report(
    report: Mapping[str, Any],
    subjects: Sequence[Subject],
    private_key: Ed25519PrivateKey,
    *,
    report_name: str = REPORT_SUBJECT_NAME,
    predicate_type: PredicateType = PREDICATE_TYPE,
) -> tuple[bytes, bytes]:
    """Sign `report` about `subjects`; returns (report JSON bytes, DSSE envelope JSON bytes).

    The report bytes are canonical JSON and are added as a subject named `report_name`, so write
    them to disk unchanged if the plain copy is to be checkable against the envelope.
    """
    report_bytes = canonical_json(dict(report))
    statement = build_statement([Subject.for_bytes(report_name, report_bytes), *subjects], report, predicate_type)
    return report_bytes, dsse.sign(statement, private_key).to_json()


def _read(path: Path, what: str) -> bytes:
    try:
        return read_bounded(path)
    except TooLarge as e:
        raise SigningError(f"{path}: {what} is {e}") from e
    except FileNotFoundError as e:
        raise SigningError(f"{path}: {what} not found") from e
    except OSError as e:
        raise SigningError(f"{path}: cannot read {what}: {e.strerror or e}") from e


def verify_envelope_file(
    envelope_path: str | os.PathLike[str],
    public_key_path: str | os.PathLike[str],
    subject_file: str | os.PathLike[str] | None = None,
) -> VerifiedStatement:
    """Verify a signed report envelope with a public key file.

    With `subject_file`, also require that file's SHA-256 to be one of the statement's subjects.
    """
    envelope_path = Path(envelope_path)
    public_key = load_public_key(public_key_path)
    envelope_bytes = _read(envelope_path, "envelope file")
    try:
        verified = dsse.verify(envelope_bytes, public_key)
    except SigningError as e:
        raise SigningError(f"{envelope_path}: {e}") from e
    if subject_file is not None:
        try:
            digest = sha256_file(subject_file)
        except OSError as e:
            raise SigningError(f"{subject_file}: cannot read subject file: {e.strerror or e}") from e
        if digest not in {s.digest.sha256 for s in verified.statement.subject}:
            names = ", ".join(s.name for s in verified.statement.subject)
            raise SigningError(
                f"{subject_file}: sha256 {digest} is not a subject of {envelope_path} "
                f"(subjects: {names}); the file differs from the one that was signed"
            )
    return verified
