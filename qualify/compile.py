"""Gate files → validated gates → one item per matrix cell.

Parse, validate and expand only: nothing here imports torch or touches a GPU.
"""

from __future__ import annotations

import difflib
import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from qualify.errors import GateFileError
from qualify.gate import GateFile, GateItem
from qualify.hashing import sha256_file
from qualify.json_limits import describe
from qualify.registry import GateKindRegistry, GateKindSpec
from qualify.schema.interpolate import interpolate_document
from qualify.schema.models import (
    DEFAULTABLE_HEADER_FIELDS,
    HEADER_FIELDS,
    GateFileModel,
    GateHeader,
)
from qualify.schema.yaml_source import LocatedDocument, Path_, load_yaml


class GateFileErrors(GateFileError):
    """Several problems in gate files, reported together so one lint run shows them all."""

    def __init__(self, errors: Sequence[GateFileError]):
        self.errors = list(errors)
        super().__init__("\n".join(e.diagnostics() for e in self.errors))

    def diagnostics(self) -> str:
        return "\n".join(e.diagnostics() for e in self.errors)


@dataclass
class CompiledFile:
    gate_file: GateFile
    items: list[GateItem] = field(default_factory=list)


def looks_like_gate_file(path: Path) -> bool:
    """Cheap check used during pytest collection: a YAML file with a top-level `suite:` key."""
    if path.suffix not in {".yaml", ".yml"}:
        return False
    try:
        with path.open("r", encoding="utf-8") as fh:
            return any(line.startswith("suite:") for line in fh)
    except (OSError, UnicodeDecodeError):
        return False


def _pydantic_errors(
    doc: LocatedDocument, exc: ValidationError, locate: Any, prefix: str = "", known: Sequence[str] = ()
) -> list[GateFileError]:
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = locate(loc)
        where = ".".join(str(p) for p in loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            text = f"unknown key {where!r}"
            close = difflib.get_close_matches(str(loc[-1]), list(known), n=1)
            if close:
                text += f" (did you mean {close[0]!r}?)"
        elif err["type"] == "missing":
            text = f"missing required key {where!r}"
        else:
            text = f"{where}: {err['msg']}"
        out.append(doc.error(path, f"{prefix}{text}"))
    return out


def _cell_id(value: Any, doc: LocatedDocument, path: Path_) -> str:
    if isinstance(value, Mapping):
        if not isinstance(value.get("id"), str):
            raise doc.error(path, "a mapping in a matrix axis needs a string 'id' to name its cell")
        return value["id"]
    if isinstance(value, list):
        raise doc.error(path, "matrix values must be scalars or mappings with an 'id'")
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _compile_gate(
    doc: LocatedDocument,
    gate_file: GateFile,
    index: int,
    raw: dict[str, Any],
    defaults: dict[str, Any],
    registry: GateKindRegistry,
) -> list[GateItem]:
    base: Path_ = ("gates", index)
    try:
        header = GateHeader.model_validate(raw)
    except ValidationError as exc:
        relevant = [e for e in exc.errors() if e["loc"] and e["loc"][0] in HEADER_FIELDS]
        if relevant:
            raise GateFileErrors(
                _pydantic_errors(doc, exc, lambda loc: (*base, *loc), prefix=f"gate #{index + 1} ")
            ) from None
        raise
    try:
        spec: GateKindSpec = registry.get(header.kind)
    except KeyError as exc:
        raise doc.error((*base, "kind"), exc.args[0]) from None

    kind_fields = {k: v for k, v in raw.items() if k not in HEADER_FIELDS}
    known = spec.params.model_fields
    default_fields = {k: v for k, v in defaults.items() if k in known and k not in kind_fields}
    header_defaults = {k: v for k, v in defaults.items() if k in DEFAULTABLE_HEADER_FIELDS and k not in raw}
    if header_defaults:
        try:
            header = GateHeader.model_validate({**raw, **header_defaults})
        except ValidationError as exc:
            # Only the defaulted fields can be wrong here: the gate's own header validated above.
            raise GateFileErrors(
                _pydantic_errors(doc, exc, lambda loc: ("defaults", *loc), prefix=f"gate #{index + 1} (from defaults) ")
            ) from None

    matrix = header.matrix or {}
    axes: list[list[tuple[str, Any]]] = []
    for key, values in matrix.items():
        kpath = (*base, "matrix", key)
        if key not in known:
            raise doc.error(kpath, f"matrix axis {key!r} is not a field of gate kind {spec.name!r}")
        if key in kind_fields:
            raise doc.error(kpath, f"{key!r} is set both on the gate and as a matrix axis")
        if not values:
            raise doc.error(kpath, f"matrix axis {key!r} is empty")
        ids = [_cell_id(v, doc, (*kpath, i)) for i, v in enumerate(values)]
        if len(set(ids)) != len(ids):
            raise doc.error(kpath, f"matrix axis {key!r} names a cell twice: {ids}")
        axes.append([(key, i) for i in range(len(values))])

    generated = _generated_axes(spec, kind_fields, doc, base, header.id)
    for key in spec.generate_reads if generated else ():
        if key in matrix or (key not in kind_fields and key in default_fields):
            where = (*base, "matrix", key) if key in matrix else ("defaults", key)
            raise doc.error(where, f"gate {header.id!r}: {key!r} is read by the gate's envelope: set it on the gate")
    for key, values in generated.items():
        if key in matrix or key in kind_fields:
            raise doc.error((*base, key), f"gate {header.id!r}: {key!r} is generated by the gate's envelope")
        matrix = {**matrix, key: values}
        axes.append([(key, i) for i in range(len(values))])
    # A generated cell's errors are reported at the field it was generated from.
    source = dict.fromkeys(generated, "envelope")

    def locate(loc: tuple[Any, ...], cell_index: dict[str, int]) -> Path_:
        head = loc[0] if loc else None
        if head in source:
            return (*base, source[head])
        if head in cell_index:
            return (*base, "matrix", head, cell_index[head], *loc[1:])
        if head in kind_fields or head not in default_fields:
            return (*base, *loc)
        return ("defaults", *loc)

    items: list[GateItem] = []
    errors: list[GateFileError] = []
    for combo in itertools.product(*axes) if axes else [()]:
        cell_index = dict(combo)
        cell = {key: matrix[key][i] for key, i in combo}
        cell_values = {k: ({kk: vv for kk, vv in v.items()} if isinstance(v, Mapping) else v) for k, v in cell.items()}
        ids = [
            _cell_id(matrix[key][i], doc, (*base, source[key]) if key in source else (*base, "matrix", key, i))
            for key, i in combo
        ]
        cell_id = "-".join(ids) if ids else None
        try:
            params = spec.params.model_validate({**default_fields, **kind_fields, **cell_values})
        except ValidationError as exc:
            # An error in a field the matrix sets belongs to that cell; any other is the gate's own and is
            # reported once, not once per cell.
            for err in exc.errors():
                in_cell = bool(err["loc"]) and err["loc"][0] in cell_index
                prefix = f"gate {header.id!r}" + (f" cell [{cell_id}]" if in_cell else "") + ": "
                one = ValidationError.from_exception_data(exc.title, [err])  # type: ignore[list-item]
                errors.extend(
                    _pydantic_errors(doc, one, lambda loc, ci=cell_index: locate(loc, ci), prefix, known=list(known))
                )
            continue
        if spec.lint is not None:
            for issue in spec.lint(params, gate_file):
                if issue.severity == "error":
                    errors.append(doc.error(locate(issue.field, cell_index), f"gate {header.id!r}: {issue.message}"))
        items.append(
            GateItem(
                name=f"{header.id}[{cell_id}]" if cell_id else header.id,
                gate_id=header.id,
                cell_id=cell_id,
                cell=cell,
                kind=spec.name,
                params=params,
                requires=tuple(header.requires),
                description=header.description or spec.protects,
                gate_file=gate_file,
                location=doc.location((*base, "id")),
            )
        )
    if errors:
        raise GateFileErrors(_dedupe(errors))
    return items


def _generated_axes(
    spec: GateKindSpec, fields: dict[str, Any], doc: LocatedDocument, base: Path_, gate_id: str
) -> dict[str, list[Any]]:
    """The matrix axes the kind derives from the gate's fields (an envelope), checked like written ones."""
    generate = spec.load_generate_axes()
    if generate is None:
        return {}
    try:
        axes = generate(fields)
    except (ValueError, ValidationError) as exc:
        where = (*base, "envelope") if "envelope" in fields else base
        detail = describe(exc) if isinstance(exc, ValidationError) else str(exc)
        raise doc.error(where, f"gate {gate_id!r}: envelope: {detail}") from None
    for key, values in axes.items():
        if not values:
            raise doc.error((*base, "envelope"), f"gate {gate_id!r}: the envelope gives no {key!r} cells")
    return axes


def _dedupe(errors: list[GateFileError]) -> list[GateFileError]:
    seen: set[str] = set()
    out = []
    for e in errors:
        if e.diagnostics() not in seen:
            seen.add(e.diagnostics())
            out.append(e)
    return out


def compile_gate_file(
    path: str | Path, registry: GateKindRegistry, env: Mapping[str, str] | None = None
) -> CompiledFile:
    """Load, validate and expand one gate file. Raises GateFileError with every problem found."""
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise doc.error((), "a gate file is a mapping with 'suite', 'version' and 'gates'")
    data = interpolate_document(doc, os.environ if env is None else env)
    try:
        model = GateFileModel.model_validate(data)
    except ValidationError as exc:
        raise GateFileErrors(
            _pydantic_errors(doc, exc, lambda loc: loc, known=list(GateFileModel.model_fields))
        ) from None

    known_anywhere = set(DEFAULTABLE_HEADER_FIELDS)
    for spec in registry:
        known_anywhere.update(spec.params.model_fields)
    for key in model.defaults:
        if key not in known_anywhere:
            raise doc.error(("defaults", key), f"unknown key {key!r} in defaults: no gate kind has this field")

    gate_file = GateFile(
        path=str(path),
        sha256=sha256_file(path),
        suite=model.suite,
        version=model.version,
        description=model.description,
        workloads=model.workloads,
        base_dir=Path(path).resolve().parent,
    )
    compiled = CompiledFile(gate_file)
    errors: list[GateFileError] = []
    seen_ids: dict[str, int] = {}
    for index, raw in enumerate(model.gates):
        gid = raw.get("id")
        if isinstance(gid, str):
            if gid in seen_ids:
                errors.append(doc.error(("gates", index, "id"), f"duplicate gate id {gid!r}"))
                continue
            seen_ids[gid] = index
        try:
            compiled.items.extend(_compile_gate(doc, gate_file, index, raw, model.defaults, registry))
        except GateFileErrors as exc:
            errors.extend(exc.errors)
        except GateFileError as exc:
            errors.append(exc)
    if errors:
        raise GateFileErrors(errors)
    return compiled


def discover_gate_files(paths: Sequence[str | Path]) -> list[Path]:
    """Expand directories into the gate files below them, in a stable order."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend(sorted(f for f in path.rglob("*.y*ml") if looks_like_gate_file(f)))
        else:
            out.append(path)
    return out
