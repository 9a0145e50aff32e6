"""The report's JSON schemas: one per report version, and the kinds' parts of the current one.

`report.schema.json` is the current version's contract. Its per-kind parts (`$defs` named
``<kind>.<Model>``, and one rule per kind in the item's `allOf`) are generated from each built-in kind's
measurements model and threshold fields; `python -m qualify.report.schema --write` regenerates them and
a test fails when the file and the models disagree. Reports of earlier versions are checked against the
schema they were written under (`report.v1.schema.json` to `report.v4.schema.json`), so `qualify render` still reads
them.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from qualify.registry import ENTRY_POINT_GROUP, GateKindRegistry, GateKindSpec

REPORT_VERSION = 5  # 5: workers per GPU of a `--gpus` run; 4: the GPU of each item and the workers of a `--gpus` run;
# 3: own item durations,
# kernel specializations and coverage, repository-relative paths
SCHEMA_DIR = Path(__file__).parent
SCHEMA_PATH = SCHEMA_DIR / "report.schema.json"
_EARLIER = {v: SCHEMA_DIR / f"report.v{v}.schema.json" for v in (1, 2, 3, 4)}
# The distribution whose kinds the shipped schema describes; a third-party kind's items are checked by the
# generic item rules only (its own package holds its model).
_DISTRIBUTION = "cartridge-qualify"
_GENERATED = "x-generated-from"


def schema_for(report: dict[str, Any]) -> dict[str, Any]:
    """The schema of the report's own version (the current one for any version this code never wrote)."""
    version = report.get("report_version")
    path = _EARLIER.get(version, SCHEMA_PATH) if isinstance(version, int) else SCHEMA_PATH
    return json.loads(path.read_text())


def builtin_registry() -> GateKindRegistry:
    """The kinds this distribution declares (whatever else is installed beside it)."""
    eps = entry_points(group=ENTRY_POINT_GROUP)
    return GateKindRegistry(ep for ep in eps if ep.dist is not None and ep.dist.name == _DISTRIBUTION)


def _absent(exclude: dict[str, Any]) -> dict[str, Any]:
    """A schema that forbids the fields a pydantic `exclude` spec names (nested specs forbid nested fields)."""
    top = sorted(k for k, v in exclude.items() if v is True)
    rule: dict[str, Any] = {}
    if top:
        rule["not"] = {"anyOf": [{"required": [k]} for k in top]}
    nested = {k: v for k, v in exclude.items() if v is not True}
    if nested:
        rule["properties"] = {
            k: _absent(v if isinstance(v, dict) else dict.fromkeys(v, True)) for k, v in sorted(nested.items())
        }
    return rule


def kind_parts(spec: GateKindSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `$defs` entries of one kind and its rule for items of that kind."""
    prefix = f"{spec.name}."
    model = spec.measurements.model_json_schema(ref_template=f"#/$defs/{prefix}{{model}}")
    defs = {prefix + name: body for name, body in model.pop("$defs", {}).items()}
    defs[prefix + spec.measurements.__name__] = model
    rule = {
        "if": {"properties": {"kind": {"const": spec.name}}, "required": ["kind"]},
        "then": {
            "properties": {
                # Items that measured nothing (skipped, or an error before measuring) carry an empty object.
                "measurements": {
                    "anyOf": [{"maxProperties": 0}, {"$ref": f"#/$defs/{prefix}{spec.measurements.__name__}"}]
                },
                # Thresholds live in the checks; the parameters must not repeat them.
                "parameters": _absent(spec.params.threshold_fields),
            }
        },
    }
    return defs, rule


def with_kinds(schema: dict[str, Any], registry: GateKindRegistry) -> dict[str, Any]:
    """`schema` with its generated per-kind parts replaced by those of `registry`'s kinds."""
    out = json.loads(json.dumps(schema))
    defs = {k: v for k, v in out["$defs"].items() if "." not in k}
    item = out["$defs"]["item"]
    rules = [r for r in item.get("allOf", []) if _GENERATED not in r]
    for spec in registry:
        kind_defs, rule = kind_parts(spec)
        defs.update(kind_defs)
        rules.append({_GENERATED: f"gate kind {spec.name}", **rule})
    out["$defs"] = defs
    item["allOf"] = rules
    return out


def current_schema() -> dict[str, Any]:
    """The shipped schema as the built-in kinds' models generate it."""
    return with_kinds(json.loads(SCHEMA_PATH.read_text()), builtin_registry())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qualify.report.schema", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"regenerate the kinds' parts of {SCHEMA_PATH.name}")
    args = ap.parse_args(argv)
    text = json.dumps(current_schema(), indent=2) + "\n"
    if args.write:
        SCHEMA_PATH.write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
