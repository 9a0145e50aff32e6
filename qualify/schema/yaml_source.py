"""Safe YAML loading that remembers where every value came from.

We compose the node graph instead of constructing Python objects, so a hostile tag such as
`!!python/object` is seen as a tag and refused before anything is built from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from qualify.errors import GateFileError, SourceLocation

# Only plain data. Timestamps, binary, sets and merge keys add ambiguity without being needed by a gate.
_SCALAR_TAGS = frozenset(
    {
        "tag:yaml.org,2002:str",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:null",
    }
)
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class LocatedDocument:
    """Plain data from one YAML file plus the source location of every mapping key and value."""

    path: str
    data: Any
    lines: tuple[str, ...]
    locations: dict[Path_, SourceLocation] = field(default_factory=dict)

    def location(self, path: Path_) -> SourceLocation:
        """The location of `path`, or of its closest located ancestor."""
        probe = tuple(path)
        while probe:
            if probe in self.locations:
                return self.locations[probe]
            probe = probe[:-1]
        return self.locations.get((), SourceLocation(self.path, 1, 1))

    def snippet(self, loc: SourceLocation) -> str | None:
        if 1 <= loc.line <= len(self.lines):
            return self.lines[loc.line - 1]
        return None

    def error(self, path: Path_, message: str) -> GateFileError:
        loc = self.location(path)
        return GateFileError(message, loc, self.snippet(loc))


def _loc(file: str, mark: yaml.Mark) -> SourceLocation:
    return SourceLocation(file, mark.line + 1, mark.column + 1)


class _Builder:
    def __init__(self, file: str, lines: tuple[str, ...]):
        self.file = file
        self.lines = lines
        self.locations: dict[Path_, SourceLocation] = {}
        self._scalars = SafeConstructor()

    def fail(self, node: yaml.Node, message: str) -> GateFileError:
        loc = _loc(self.file, node.start_mark)
        return GateFileError(message, loc, self.lines[loc.line - 1] if loc.line <= len(self.lines) else None)

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.locations.setdefault(path, _loc(self.file, node.start_mark))
        if isinstance(node, yaml.ScalarNode):
            if node.tag not in _SCALAR_TAGS:
                raise self.fail(node, f"YAML tag {node.tag!r} is not allowed in a gate file (plain data only)")
            return self._scalars.construct_object(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ_TAG:
                raise self.fail(node, f"YAML tag {node.tag!r} is not allowed in a gate file (plain data only)")
            return [self.build(child, (*path, i)) for i, child in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            if node.tag != _MAP_TAG:
                raise self.fail(node, f"YAML tag {node.tag!r} is not allowed in a gate file (plain data only)")
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise self.fail(key_node, "YAML merge keys ('<<') are not allowed in a gate file")
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                    raise self.fail(key_node, "mapping keys must be plain strings")
                key = key_node.value
                if key in out:
                    raise self.fail(key_node, f"duplicate key {key!r}")
                self.locations[(*path, key)] = _loc(self.file, key_node.start_mark)
                out[key] = self.build(value_node, (*path, key))
            return out
        raise self.fail(node, f"unsupported YAML node {type(node).__name__}")


def load_yaml(path: str | Path) -> LocatedDocument:
    """Parse one YAML document from `path` into plain data with source locations.

    Raises GateFileError (with file:line:col) for syntax errors, non-safe tags, duplicate keys,
    multiple documents and unreadable files.
    """
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GateFileError(f"{file}: no such gate file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GateFileError(f"{file}: cannot read gate file: {exc}") from None
    lines = tuple(text.splitlines())
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = _loc(file, mark) if mark else SourceLocation(file, 1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        snippet = lines[loc.line - 1] if 0 < loc.line <= len(lines) else None
        raise GateFileError(f"YAML syntax error: {problem}", loc, snippet) from None
    except yaml.YAMLError as exc:
        raise GateFileError(f"YAML error: {exc}", SourceLocation(file, 1, 1)) from None
    if len(nodes) != 1:
        raise GateFileError(
            f"a gate file holds exactly one YAML document, found {len(nodes)}", SourceLocation(file, 1, 1)
        )
    builder = _Builder(file, lines)
    data = builder.build(nodes[0], ())
    return LocatedDocument(file, data, lines, builder.locations)
