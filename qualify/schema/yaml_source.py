"""Safe YAML loading that remembers where every value came from.

We compose the node graph instead of constructing Python objects, so a hostile tag such as
`!!python/object` is seen as a tag and refused before anything is built from it.

A gate file may come from a pull request, so reading one is bounded: its size, its node count and its
nesting depth have limits, and aliases are refused outright (a 640-byte file of nested aliases would
otherwise expand to gigabytes, and a self-referencing alias would recurse forever). No gate needs them.
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

# The largest gate file shipped is a few KiB with about 400 nodes, 7 levels deep. The limits leave 50x headroom
# while keeping the pure-Python parser near a second on a loaded 2-core runner (50,000 nodes took 2.7 s), and
# the composer's and builder's recursion far below Python's recursion limit.
MAX_GATE_FILE_BYTES = 1 << 20
MAX_NODES = 20_000
MAX_DEPTH = 64
_MERGE_TAG = "tag:yaml.org,2002:merge"
# A quoted source line is for orientation; a hostile one-line file must not flood the terminal.
_SNIPPET_CHARS = 200


def _snippet(lines: tuple[str, ...], line: int) -> str | None:
    if not 1 <= line <= len(lines):
        return None
    text = lines[line - 1]
    return text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + " ..."


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
        return _snippet(self.lines, loc.line)

    def error(self, path: Path_, message: str) -> GateFileError:
        loc = self.location(path)
        return GateFileError(message, loc, self.snippet(loc))


def _loc(file: str, mark: yaml.Mark) -> SourceLocation:
    return SourceLocation(file, mark.line + 1, mark.column + 1)


class _Refused(Exception):
    """Raised from inside the composer; turned into a located GateFileError by `load_yaml`."""

    def __init__(self, mark: yaml.Mark, message: str):
        self.mark = mark
        self.message = message
        super().__init__(message)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer counts nodes and depth and refuses aliases as it goes.

    Checked while composing, not afterwards: the node graph of an alias bomb is small, but a
    self-referencing alias or 100,000 levels of `[` make the composer itself recurse without bound.
    """

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            # `index` is the key node when composing a mapping value, so `<<: *base` is named as what it is.
            if isinstance(index, yaml.ScalarNode) and index.tag == _MERGE_TAG:
                raise _Refused(index.start_mark, "YAML merge keys ('<<') are not allowed in a gate file")
            raise _Refused(
                event.start_mark,
                f"YAML aliases ('*{event.anchor}') are not allowed in a gate file; write the value out in full",
            )
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(self.peek_event().start_mark, f"gate file has more than {MAX_NODES} YAML nodes")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(self.peek_event().start_mark, f"gate file nests deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Builder:
    def __init__(self, file: str, lines: tuple[str, ...]):
        self.file = file
        self.lines = lines
        self.locations: dict[Path_, SourceLocation] = {}
        self._scalars = SafeConstructor()

    def fail(self, node: yaml.Node, message: str) -> GateFileError:
        loc = _loc(self.file, node.start_mark)
        return GateFileError(message, loc, _snippet(self.lines, loc.line))

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.locations.setdefault(path, _loc(self.file, node.start_mark))
        if isinstance(node, yaml.ScalarNode):
            if node.tag not in _SCALAR_TAGS:
                raise self.fail(node, f"YAML tag {node.tag!r} is not allowed in a gate file (plain data only)")
            try:
                return self._scalars.construct_object(node, deep=True)
            except ValueError as exc:  # e.g. an integer beyond Python's 4300-digit conversion limit
                raise self.fail(node, f"invalid {node.tag.rsplit(':', 1)[-1]} value: {exc}") from None
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ_TAG:
                raise self.fail(node, f"YAML tag {node.tag!r} is not allowed in a gate file (plain data only)")
            return [self.build(child, (*path, i)) for i, child in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            if node.tag != _MAP_TAG:
                raise self.fail(node, f"YAML tag {node.tag!r} is not allowed in a gate file (plain data only)")
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
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
    aliases, multiple documents, unreadable files and files beyond the size, node or depth limits.
    """
    file = str(path)
    try:
        with Path(path).open("rb") as fh:
            # Read one byte past the limit instead of trusting stat: a FIFO or /dev/zero has no size.
            raw = fh.read(MAX_GATE_FILE_BYTES + 1)
    except FileNotFoundError:
        raise GateFileError(f"{file}: no such gate file") from None
    except OSError as exc:
        raise GateFileError(f"{file}: cannot read gate file: {exc.strerror or exc}") from None
    if len(raw) > MAX_GATE_FILE_BYTES:
        raise GateFileError(
            f"gate file is larger than the {MAX_GATE_FILE_BYTES // (1 << 20)} MiB limit", SourceLocation(file, 1, 1)
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GateFileError(f"{file}: cannot read gate file: {exc}") from None
    lines = tuple(text.splitlines())
    try:
        nodes = list(yaml.compose_all(text, Loader=_BoundedLoader))
    except _Refused as exc:
        loc = _loc(file, exc.mark)
        raise GateFileError(exc.message, loc, _snippet(lines, loc.line)) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = _loc(file, mark) if mark else SourceLocation(file, 1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        raise GateFileError(f"YAML syntax error: {problem}", loc, _snippet(lines, loc.line)) from None
    except yaml.YAMLError as exc:
        raise GateFileError(f"YAML error: {exc}", SourceLocation(file, 1, 1)) from None
    if len(nodes) != 1:
        raise GateFileError(
            f"a gate file holds exactly one YAML document, found {len(nodes)}", SourceLocation(file, 1, 1)
        )
    builder = _Builder(file, lines)
    data = builder.build(nodes[0], ())
    return LocatedDocument(file, data, lines, builder.locations)
