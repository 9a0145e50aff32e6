"""`${VAR}` and `${VAR:-default}` in gate-file strings, so paths can differ per runner.

Expanded values end up in the signed report (ids, descriptions, paths), so only variables on an
explicit allowlist expand: those the gate file declares in its top-level `variables:` list and those
named in the comma-separated `QUALIFY_VARS` environment variable. A variable whose name looks like a
secret (`GITHUB_TOKEN`, `DB_PASS`, ...) never expands, declared or not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from qualify.schema.models import VARIABLE_NAME_PATTERN
from qualify.schema.yaml_source import LocatedDocument, Path_
from qualify.secret_names import secret_marker

VARIABLES_KEY = "variables"
ALLOWLIST_ENV = "QUALIFY_VARS"
VARIABLE_NAME = re.compile(VARIABLE_NAME_PATTERN)

# `$${` escapes a literal `${`.
_PATTERN = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


class VariableNotAllowed(Exception):
    """`${name}` names a variable that may not expand here; `reason` says why and how to allow it."""

    def __init__(self, name: str, reason: str):
        self.name = name
        self.reason = reason
        super().__init__(reason)


def interpolate_string(text: str, env: Mapping[str, str], allowed: frozenset[str] | None = None) -> str:
    """Expand variables in `text`.

    Raises KeyError(name) for an unset variable that has no default and, when `allowed` is given,
    VariableNotAllowed for a name outside it or one that looks like a secret.
    """

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        if allowed is not None:
            _check_allowed(name, allowed)
        value = env.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise KeyError(name)
            return default
        return value

    return _PATTERN.sub(replace, text)


def _check_allowed(name: str, allowed: frozenset[str]) -> None:
    marker = secret_marker(name)
    if marker is not None:
        raise VariableNotAllowed(
            name,
            f"${{{name}}}: variable {name} is refused because its name looks like a secret (contains "
            f"{marker!r}); expanded values go into the signed report, so gate files cannot read secrets",
        )
    if name not in allowed:
        raise VariableNotAllowed(
            name,
            f"${{{name}}}: variable {name} is not allowed; declare it in the gate file "
            f"({VARIABLES_KEY}: [{name}]) or set {ALLOWLIST_ENV}={name}",
        )


def declared_variables(doc: LocatedDocument) -> frozenset[str]:
    """The names in the gate file's top-level `variables:` list; GateFileError for a malformed or secret one."""
    if not isinstance(doc.data, dict) or VARIABLES_KEY not in doc.data:
        return frozenset()
    names = doc.data[VARIABLES_KEY]
    if not isinstance(names, list):
        raise doc.error((VARIABLES_KEY,), f"'{VARIABLES_KEY}' is a list of environment variable names")
    for i, name in enumerate(names):
        if not isinstance(name, str) or not VARIABLE_NAME.match(name):
            raise doc.error((VARIABLES_KEY, i), f"{name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        marker = secret_marker(name)
        if marker is not None:
            raise doc.error(
                (VARIABLES_KEY, i),
                f"variable {name} is refused because its name looks like a secret (contains {marker!r}); "
                "expanded values go into the signed report, so gate files cannot read secrets",
            )
    return frozenset(names)


def allowed_variables(doc: LocatedDocument, env: Mapping[str, str]) -> frozenset[str]:
    """Declared in the gate file, plus those listed in `QUALIFY_VARS` (comma-separated)."""
    from_env = {part.strip() for part in env.get(ALLOWLIST_ENV, "").split(",") if part.strip()}
    return declared_variables(doc) | frozenset(from_env)


def interpolate_document(doc: LocatedDocument, env: Mapping[str, str]) -> Any:
    """Return a copy of the document's data with every string interpolated from allowed variables."""
    allowed = allowed_variables(doc, env)

    def walk(value: Any, path: Path_) -> Any:
        if isinstance(value, str):
            try:
                return interpolate_string(value, env, allowed)
            except VariableNotAllowed as exc:
                raise doc.error(path, exc.reason) from None
            except KeyError as exc:
                raise doc.error(
                    path, f"environment variable {exc.args[0]} is not set (write ${{{exc.args[0]}:-default}})"
                ) from None
        if isinstance(value, list):
            return [walk(v, (*path, i)) for i, v in enumerate(value)]
        if isinstance(value, dict):
            # The declaration names variables; it is not itself expanded.
            return {k: v if path == () and k == VARIABLES_KEY else walk(v, (*path, k)) for k, v in value.items()}
        return value

    return walk(doc.data, ())
