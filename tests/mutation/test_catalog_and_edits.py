"""The mutant catalog and its edits: every declared mutant applies to today's source and changes it; a stale,
ambiguous or malformed entry is refused with the file and line; the shipped kernel carries no fault switch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qualify.errors import GateFileError
from qualify.mutation.catalog import Mutant, load_catalog
from qualify.mutation.materialize import apply_edit, materialize, tree_sha256

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "mutation" / "cartridge_attn.yaml"
GLUON_CATALOG = ROOT / "mutation" / "cartridge_attn_gluon.yaml"


def test_the_catalog_covers_what_the_issue_lists_and_every_edit_applies(tmp_path: Path) -> None:
    loaded = load_catalog(CATALOG)
    mutants = loaded.catalog.mutants
    assert len(mutants) >= 15
    need = {"masking", "packing", "ragged-ends", "page-table", "boundary", "v-scales", "online-softmax", "dtype",
            "strides", "tile-counts"}  # fmt: skip
    assert need <= {m.category for m in mutants}
    target = loaded.root / loaded.catalog.target
    original = tree_sha256(target)
    digests = set()
    for m in mutants:
        copy = materialize(target, tmp_path / m.id, m)
        before = (target / m.file).read_text()
        after = (copy.package / m.file).read_text()
        assert after != before, m.id
        assert copy.tree_sha256 != original, m.id
        digests.add(copy.tree_sha256)
        compile(after, m.file, "exec")  # still Python: a syntax error would be a broken mutant, not a kill
    assert len(digests) == len(mutants), "two mutants produce the same source"
    assert tree_sha256(target) == original, "the original package was modified"


def test_the_gluon_catalog_edits_the_gluon_kernel_only_and_every_edit_applies(tmp_path: Path) -> None:
    # Its gate must be the Gluon gate: run against the Triton gate, every mutant would survive untouched.
    loaded = load_catalog(GLUON_CATALOG)
    assert [Path(g).name for g in loaded.catalog.gate] == ["kernel_numerics_gluon.yaml"]
    mutants = loaded.catalog.mutants
    assert len(mutants) >= 15 and {m.file for m in mutants} == {"_gluon_prefill.py"}
    assert {"masking", "ragged-ends", "page-table", "packing", "v-scales", "online-softmax"} <= {
        m.category for m in mutants
    }
    target = loaded.root / loaded.catalog.target
    digests = {materialize(target, tmp_path / m.id, m).tree_sha256 for m in mutants}
    assert len(digests) == len(mutants), "two mutants produce the same source"


def test_the_shipped_kernel_has_no_fault_switch() -> None:
    sources = {p.name: p.read_text() for p in (ROOT / "kernels" / "cartridge_attn").glob("*.py")}
    assert "faults.py" not in sources
    for name, text in sources.items():
        assert not re.search(r"\bFAULT\b|_fault\b|Fault\.", text), f"{name} still carries a fault hook"


def _mutant(**kw: object) -> Mutant:
    base = {"id": "m", "category": "masking", "description": "d", "file": "x.py", "find": "a = 1", "replace": "a = 2"}
    return Mutant.model_validate({**base, **kw})


def test_an_edit_must_match_exactly_one_place_unless_an_occurrence_is_named() -> None:
    src = "a = 1\nb = a\na = 1\n"
    with pytest.raises(GateFileError, match="occurs 2 times"):
        apply_edit(src, _mutant())
    assert apply_edit(src, _mutant(occurrence=2)) == "a = 1\nb = a\na = 2\n"
    with pytest.raises(GateFileError, match="occurrence 3 asked"):
        apply_edit(src, _mutant(occurrence=3))
    with pytest.raises(GateFileError, match="no longer occurs"):
        apply_edit("c = 3\n", _mutant())


def test_a_multi_line_edit_is_matched_and_written_at_the_source_indentation() -> None:
    src = "def f():\n    if x:\n        y = 1\n    return y\n"
    got = apply_edit(src, _mutant(find="if x:\n    y = 1", replace="if x:\n    y = 2\n    z = 3"))
    assert got == "def f():\n    if x:\n        y = 2\n        z = 3\n    return y\n"
    got = apply_edit(src, _mutant(find="return y", replace="y = -y\nreturn y"))
    assert got == "def f():\n    if x:\n        y = 1\n    y = -y\n    return y\n"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("    file: ../api.py\n", "mutants.0.file"),
        ("    replace: x = 1\n", "replace equals find"),
        ("    category: typo\n", "mutants.0.category"),
        ("    colour: red\n", "unknown key 'mutants.0.colour'"),
    ],
)
def test_a_bad_catalog_entry_is_refused_with_its_line(tmp_path: Path, entry: str, message: str) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("x = 1\n")
    (tmp_path / "g.yaml").write_text("suite: s\nversion: 1\ngates: []\n")
    (tmp_path / "mutants").mkdir()
    fields = {"id": "m1", "category": "masking", "description": "d", "file": "__init__.py", "find": "x = 1",
              "replace": "x = 2"}  # fmt: skip
    key = entry.split(":")[0].strip()
    lines = [f"    {k}: {v}\n" for k, v in fields.items() if k != key] + [entry]
    text = "version: 1\ntarget: ../pkg\ngate: [../g.yaml]\nmutants:\n  - id: m1\n" + "".join(
        ln for ln in lines if not ln.startswith("    id:")
    )
    path = tmp_path / "mutants" / "c.yaml"
    path.write_text(text)
    with pytest.raises(GateFileError) as exc:
        load_catalog(path)
    assert message in str(exc.value)
    assert str(path) in exc.value.diagnostics() and ":" in exc.value.diagnostics()


def test_a_catalog_naming_a_missing_file_or_gate_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("x = 1\n")
    (tmp_path / "mutants").mkdir()
    path = tmp_path / "mutants" / "c.yaml"
    body = "  - {id: m1, category: masking, description: d, file: nope.py, find: 'x = 1', replace: 'x = 2'}\n"
    path.write_text("version: 1\ntarget: ../pkg\ngate: [../missing.yaml]\nmutants:\n" + body)
    with pytest.raises(GateFileError, match=r"gate file '\.\./missing\.yaml' not found"):
        load_catalog(path)
    (tmp_path / "missing.yaml").write_text("suite: s\n")
    with pytest.raises(GateFileError, match=r"mutant m1: 'nope.py' is not a file of \.\./pkg"):
        load_catalog(path)
