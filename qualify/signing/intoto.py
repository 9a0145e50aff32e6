"""in-toto Statement v1: what a qualification report attests, and about which files.

https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qualify.errors import SigningError
from qualify.hashing import sha256_bytes, sha256_file
from qualify.json_limits import canonical_json, describe

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE: Final = "https://cartridge-qualify.dev/qualification-report/v1"
# The signed result of `qualify mutants`: which deliberately wrong kernels the numerics gate caught.
MUTATION_PREDICATE_TYPE: Final = "https://cartridge-qualify.dev/mutation-report/v1"
PredicateType = Literal[
    "https://cartridge-qualify.dev/qualification-report/v1", "https://cartridge-qualify.dev/mutation-report/v1"
]

# Strict: a verifier must not coerce ("1" -> 1) or silently drop fields it does not know, or two
# readers could see different claims in the same signed bytes.
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


class DigestSet(BaseModel):
    """Only sha256: one algorithm we produce and check, rather than several we would have to trust."""

    model_config = _STRICT

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Subject(BaseModel):
    """An artifact the statement is about: a name for people, a digest for machines."""

    model_config = _STRICT

    name: str = Field(min_length=1)
    digest: DigestSet

    @classmethod
    def for_bytes(cls, name: str, data: bytes) -> Subject:
        return cls(name=name, digest=DigestSet(sha256=sha256_bytes(data)))

    @classmethod
    def for_file(cls, path: str | os.PathLike[str], name: str | None = None) -> Subject:
        """Subject for a file's contents, named by its file name unless `name` is given."""
        try:
            digest = sha256_file(path)
        except OSError as e:
            raise SigningError(f"{path}: cannot hash subject file: {e.strerror or e}") from e
        return cls(name=name or Path(path).name, digest=DigestSet(sha256=digest))


class Statement(BaseModel):
    model_config = _STRICT

    type_: Literal["https://in-toto.io/Statement/v1"] = Field(alias="_type")
    subject: list[Subject] = Field(min_length=1)
    predicate_type: PredicateType = Field(alias="predicateType")
    predicate: dict[str, Any]


def build_statement(
    subjects: Sequence[Subject], predicate: Mapping[str, Any], predicate_type: PredicateType = PREDICATE_TYPE
) -> bytes:
    """Canonical JSON bytes of a Statement about `subjects` carrying `predicate` (by default, the report)."""
    try:
        statement = Statement.model_validate(
            {
                "_type": STATEMENT_TYPE,
                "subject": [s.model_dump() for s in subjects],
                "predicateType": predicate_type,
                "predicate": dict(predicate),
            }
        )
    except ValidationError as e:
        raise SigningError(f"cannot build in-toto Statement: {describe(e)}") from e
    # The predicate goes through json.dumps as given (not pydantic's lenient JSON mode), so a value
    # without an exact JSON form is an error here instead of being stringified differently later.
    return canonical_json(
        {
            "_type": statement.type_,
            "subject": [s.model_dump() for s in statement.subject],
            "predicateType": statement.predicate_type,
            "predicate": statement.predicate,
        }
    )
