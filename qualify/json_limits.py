"""The one JSON dialect signing emits and accepts, and the size and depth bounds every JSON reader applies.

Emitting: sorted keys, no insignificant whitespace, UTF-8, no NaN/Infinity, so the same report always
yields the same bytes (and digest). Accepting: standard JSON only, and no duplicate object keys,
because two parsers that resolve a duplicate differently would disagree on what was signed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from qualify.errors import SigningError

# The largest signed report produced so far is 0.5 MB, 11 levels deep (envelope 3). A bound on both
# keeps a hostile file from exhausting memory, and json's recursive parser (and every recursive
# reader after it) from a RecursionError on `[[[[...`.
MAX_ENVELOPE_BYTES = 32 << 20
MAX_JSON_DEPTH = 64

# A JSON string (skipped whole, so brackets inside it do not count) or one bracket. The closing quote is
# optional: an unterminated string then runs to the end in one match. Were it required, every later quote would
# start a new scan to the end that fails, which is quadratic (a 60 KB run of \" took 26 s); the parser still
# refuses the unterminated string afterwards.
_STRING_OR_BRACKET = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.S)
_OPENERS = frozenset(b"[{")


class TooLarge(ValueError):
    """A file or document is beyond a size or depth limit; the message says which."""


def read_bounded(path: str | os.PathLike[str], limit: int = MAX_ENVELOPE_BYTES) -> bytes:
    """The bytes of `path`; TooLarge past `limit`, never reading more than one byte beyond it. OSError passes."""
    with Path(path).open("rb") as fh:
        # Read instead of trusting stat: a FIFO or a growing file has no meaningful size.
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"larger than the {limit >> 20} MiB limit")
    return data


def check_depth(data: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """TooLarge if the JSON text `data` nests arrays/objects deeper than `limit`; checked without parsing."""
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(data):
        token = match.group()
        if len(token) != 1:
            continue  # a string
        if token[0] in _OPENERS:
            depth += 1
            if depth > limit:
                raise TooLarge(f"nested deeper than {limit} levels")
        else:
            depth -= 1


def canonical_json(value: Any) -> bytes:
    """Canonical UTF-8 JSON bytes of a JSON-compatible value; SigningError if it has no JSON form."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError as e:
        raise SigningError(f"report cannot be written as standard JSON (NaN or Infinity?): {e}") from e
    except TypeError as e:
        raise SigningError(f"report holds a value with no JSON form: {e}") from e
    return text.encode("utf-8")


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"non-standard JSON constant {name}")


def strict_loads(data: bytes) -> Any:
    """Parse UTF-8 JSON bytes; ValueError with the reason if they are not strict, standard JSON.

    TooLarge (a ValueError) if they nest deeper than MAX_JSON_DEPTH.
    """
    check_depth(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e.reason} at byte {e.start})") from e
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)
    except ValueError as e:  # json.JSONDecodeError is a ValueError, so are the hooks' errors
        raise ValueError(f"not valid JSON: {e}") from e


def describe(error: ValidationError, limit: int = 3) -> str:
    """A one-line reason from a pydantic error: `field.path: message; ...`, without echoing input values."""
    parts = []
    for item in error.errors(include_url=False, include_input=False)[:limit]:
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        parts.append(f"{where}: {item['msg']}")
    more = error.error_count() - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)
