from __future__ import annotations

from pathlib import Path

import pytest

from qualify.errors import GateFileError
from qualify.schema.yaml_source import load_yaml


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "g.yaml"
    p.write_text(text)
    return p


def test_python_object_tag_is_rejected_without_being_constructed(tmp_path: Path) -> None:
    marker = tmp_path / "constructed"
    p = write(tmp_path, f"suite: s\nversion: 1\nevil: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(GateFileError) as err:
        load_yaml(p)
    assert not marker.exists()
    assert f"{p}:3:7:" in err.value.diagnostics()
    assert "python/object" in err.value.diagnostics()


@pytest.mark.parametrize("tag", ["!!binary aGk=", "!!set {a, b}", "!custom 1", "!!timestamp 2001-12-14"])
def test_every_non_plain_tag_is_rejected(tmp_path: Path, tag: str) -> None:
    with pytest.raises(GateFileError, match="not allowed"):
        load_yaml(write(tmp_path, f"suite: s\nx: {tag}\n"))


def test_duplicate_key_points_at_the_second_occurrence(tmp_path: Path) -> None:
    with pytest.raises(GateFileError) as err:
        load_yaml(write(tmp_path, "suite: a\nversion: 1\nsuite: b\n"))
    assert ":3:1: duplicate key 'suite'" in err.value.diagnostics()


def test_merge_keys_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(GateFileError, match="merge keys"):
        load_yaml(write(tmp_path, "base: &b {a: 1}\nother:\n  <<: *b\n"))


def test_syntax_error_has_location_and_snippet(tmp_path: Path) -> None:
    with pytest.raises(GateFileError) as err:
        load_yaml(write(tmp_path, "suite: s\ngates: [a, b\n"))
    text = err.value.diagnostics()
    assert text.startswith(f"{tmp_path / 'g.yaml'}:")
    assert "YAML syntax error" in text


def test_multiple_documents_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(GateFileError, match="exactly one YAML document"):
        load_yaml(write(tmp_path, "suite: a\n---\nsuite: b\n"))


def test_values_and_locations(tmp_path: Path) -> None:
    doc = load_yaml(write(tmp_path, "suite: s\ngates:\n  - id: a\n    x: 1.5\n    y: [true, null]\n"))
    assert doc.data == {"suite": "s", "gates": [{"id": "a", "x": 1.5, "y": [True, None]}]}
    loc = doc.location(("gates", 0, "x"))
    assert (loc.line, loc.col) == (4, 5)
    # A path below a scalar falls back to the closest located ancestor.
    assert doc.location(("gates", 0, "x", "deeper")) == loc


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(GateFileError, match="no such gate file"):
        load_yaml(tmp_path / "absent.yaml")
