from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from qualify.compile import GateFileErrors, compile_gate_file, looks_like_gate_file
from qualify.errors import GateFileError
from qualify.registry import GateKindRegistry, default_registry


def write(tmp_path: Path, text: str, name: str = "g.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip())
    return p


def registry() -> GateKindRegistry:
    return default_registry()


def errors_of(path: Path, env: dict[str, str] | None = None) -> str:
    with pytest.raises(GateFileError) as err:
        compile_gate_file(path, registry(), env=env or {})
    return err.value.diagnostics()


def test_matrix_expands_to_the_cross_product_in_declared_order(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        suite: s
        version: 1
        gates:
          - id: cmp
            kind: compare
            limit: 1.0
            matrix:
              value: [0.5, 2.0]
              mode: [upper, lower]
        """,
    )
    items = compile_gate_file(p, registry(), env={}).items
    assert [i.name for i in items] == ["cmp[0.5-upper]", "cmp[0.5-lower]", "cmp[2.0-upper]", "cmp[2.0-lower]"]
    assert [(i.params.value, i.params.mode) for i in items] == [
        (0.5, "upper"),
        (0.5, "lower"),
        (2.0, "upper"),
        (2.0, "lower"),
    ]
    assert all(i.params.limit == 1.0 for i in items)


def test_gate_without_matrix_is_one_item_named_by_its_id(tmp_path: Path) -> None:
    p = write(tmp_path, "suite: s\nversion: 1\ngates:\n  - {id: one, kind: compare, value: 1.0, limit: 2.0}\n")
    (item,) = compile_gate_file(p, registry(), env={}).items
    assert item.name == "one" and item.cell_id is None


def test_misspelled_key_reports_file_line_col(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        suite: s
        version: 1
        gates:
          - id: cmp
            kind: compare
            value: 1.0
            limt: 2.0
        """,
    )
    text = errors_of(p)
    assert f"{p}:7:5: gate 'cmp': unknown key 'limt' (did you mean 'limit'?)" in text
    assert "limt: 2.0" in text  # the offending line is quoted


def test_wrong_type_is_not_coerced(tmp_path: Path) -> None:
    p = write(tmp_path, "suite: s\nversion: 1\ngates:\n  - {id: c, kind: compare, value: '1.0', limit: 2.0}\n")
    assert "value: Input should be a valid number" in errors_of(p)


def test_bad_enum_value_in_a_matrix_cell_points_into_the_matrix(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        suite: s
        version: 1
        gates:
          - id: cmp
            kind: compare
            value: 1.0
            limit: 2.0
            matrix:
              mode:
                - upper
                - sideways
        """,
    )
    text = errors_of(p)
    assert f"{p}:11:11:" in text
    assert "cell [sideways]" in text


def test_unknown_kind_lists_the_known_ones(tmp_path: Path) -> None:
    p = write(tmp_path, "suite: s\nversion: 1\ngates:\n  - {id: c, kind: compair}\n")
    text = errors_of(p)
    assert "unknown gate kind 'compair'" in text and "compare" in text and "loss_increase" in text


def test_duplicate_ids_are_an_error(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        suite: s
        version: 1
        gates:
          - {id: c, kind: compare, value: 1.0, limit: 2.0}
          - {id: c, kind: compare, value: 1.0, limit: 2.0}
        """,
    )
    assert f"{p}:5:6: duplicate gate id 'c'" in errors_of(p)


def test_all_errors_of_a_file_are_reported_together(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        suite: s
        version: 1
        gates:
          - {id: a, kind: compare, value: 1.0, limit: 2.0, extra1: 1}
          - {id: b, kind: compare, value: 1.0, limit: 2.0, extra2: 1}
        """,
    )
    with pytest.raises(GateFileErrors) as err:
        compile_gate_file(p, registry(), env={})
    assert len(err.value.errors) == 2


def test_top_level_schema_errors(tmp_path: Path) -> None:
    text = errors_of(write(tmp_path, "suite: s\nversion: 2\ngates: []\nextra: 1\n"))
    assert "version" in text and "unknown key 'extra'" in text and "gates" in text


def test_matrix_axis_must_be_a_kind_field_and_not_also_set(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        suite: s
        version: 1
        gates:
          - id: c
            kind: compare
            value: 1.0
            limit: 2.0
            matrix: {speed: [1, 2]}
        """,
    )
    assert "matrix axis 'speed' is not a field of gate kind 'compare'" in errors_of(p)
    p2 = write(
        tmp_path,
        "suite: s\nversion: 1\ngates:\n  - {id: c, kind: compare, value: 1.0, limit: 2.0, matrix: {value: [1.0]}}\n",
        "g2.yaml",
    )
    assert "set both on the gate and as a matrix axis" in errors_of(p2)


def test_defaults_apply_and_unknown_defaults_are_errors(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        suite: s
        version: 1
        defaults: {limit: 3.0, requires: [cuda]}
        gates:
          - {id: c, kind: compare, value: 1.0}
          - {id: d, kind: compare, value: 1.0, limit: 0.5, requires: [cpu]}
        """,
    )
    c, d = compile_gate_file(p, registry(), env={}).items
    assert (c.params.limit, c.requires) == (3.0, ("cuda",))
    assert (d.params.limit, d.requires) == (0.5, ("cpu",))
    bad = write(
        tmp_path, "suite: s\nversion: 1\ndefaults: {colour: red}\ngates:\n  - {id: c, kind: compare}\n", "b.yaml"
    )
    assert f"{bad}:3:12: unknown key 'colour' in defaults" in errors_of(bad)


def test_interpolation_of_variables_and_defaults(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        suite: s
        version: 1
        variables: [DATA, MISSING]
        gates:
          - {id: c, kind: compare, value: 1.0, limit: 2.0, file: "${DATA}/x-${MISSING:-fallback}.bin"}
          - {id: d, kind: compare, value: 1.0, limit: 2.0, file: "$${LITERAL}"}
        """,
    )
    c, d = compile_gate_file(p, registry(), env={"DATA": "/data"}).items
    assert c.params.file == "/data/x-fallback.bin"
    assert d.params.file == "${LITERAL}"
    assert "environment variable DATA is not set" in errors_of(p, env={"OTHER": "1"})
    # Only declared variables expand; QUALIFY_VARS allows more from the runner's side.
    gate = '  - {id: c, kind: compare, value: 1.0, limit: 2.0, file: "${DATA}"}\n'
    undeclared = write(tmp_path, f"suite: s\nversion: 1\ngates:\n{gate}", "u.yaml")
    assert f"{undeclared}:4:52: ${{DATA}}: variable DATA is not allowed" in errors_of(undeclared, env={"DATA": "/d"})
    only_env = compile_gate_file(undeclared, registry(), env={"DATA": "/d", "QUALIFY_VARS": "X, DATA"})
    assert only_env.items[0].params.file == "/d"


def test_requirement_names_are_validated(tmp_path: Path) -> None:
    p = write(
        tmp_path, "suite: s\nversion: 1\ngates:\n  - {id: c, kind: compare, value: 1.0, limit: 2.0, requires: [tpu]}\n"
    )
    assert "requires.0" in errors_of(p)


def test_collection_filter_only_takes_yaml_with_a_suite(tmp_path: Path) -> None:
    assert looks_like_gate_file(write(tmp_path, "suite: s\n", "a.yaml"))
    assert not looks_like_gate_file(write(tmp_path, "name: ci\non: push\n", "workflow.yml"))
    assert not looks_like_gate_file(write(tmp_path, "suite: s\n", "a.txt"))


def test_loss_increase_lint_checks_references(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        suite: s
        version: 1
        workloads:
          w:
            model: {source: path, path: /m}
            cartridges: {run1: a.pt}
            eval_set: e.json
        gates:
          - id: loss
            kind: loss_increase
            workload: w
            checkpoint: run9
            max_rel_increase: {K16/V8: 0.001}
            positive_control: {layout: K8/V8, minimum: 0.002}
        """,
    )
    assert "workload 'w' has no cartridge 'run9' (known: run1)" in errors_of(p)
