"""`${VAR}` and `${VAR:-default}` in gate-file strings, so paths can differ per runner."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from qualify.schema.yaml_source import LocatedDocument, Path_

# `$${` escapes a literal `${`.
_PATTERN = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def interpolate_string(text: str, env: Mapping[str, str]) -> str:
    """Expand variables in `text`; raise KeyError(name) for an unset variable that has no default."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        value = env.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise KeyError(name)
            return default
        return value

    return _PATTERN.sub(replace, text)


def interpolate_document(doc: LocatedDocument, env: Mapping[str, str]) -> Any:
    """Return a copy of the document's data with every string interpolated."""

    def walk(value: Any, path: Path_) -> Any:
        if isinstance(value, str):
            try:
                return interpolate_string(value, env)
            except KeyError as exc:
                raise doc.error(
                    path, f"environment variable {exc.args[0]} is not set (write ${{{exc.args[0]}:-default}})"
                ) from None
        if isinstance(value, list):
            return [walk(v, (*path, i)) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {k: walk(v, (*path, k)) for k, v in value.items()}
        return value

    return walk(doc.data, ())
