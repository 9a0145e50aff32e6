"""The mutant catalog: which source edits to apply, to which package, checked by which gate files."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from qualify.errors import GateFileError
from qualify.hashing import sha256_file
from qualify.schema.yaml_source import LocatedDocument, load_yaml

Category = Literal[
    "masking",
    "packing",
    "ragged-ends",
    "page-table",
    "boundary",
    "v-scales",
    "online-softmax",
    "dtype",
    "strides",
    "tile-counts",
    "split-decode",
    "decode-cascade",
    "dispatch",
]

_ID = r"^[a-z0-9][a-z0-9-]{0,79}$"


class Mutant(BaseModel):
    """One deliberately wrong edit: `find` (exact text of `file`, `occurrence`-th match) becomes `replace`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=_ID)
    category: Category
    description: str = Field(min_length=1)
    file: str = Field(min_length=1)
    find: str = Field(min_length=1)
    replace: str
    occurrence: int | None = Field(default=None, ge=1)
    interpreter: bool = False  # also run by the CPU tests under the Triton interpreter
    # A survivor may be kept only with the argument why no input can tell it from the kernel.
    equivalent: str | None = Field(default=None, min_length=20)

    @field_validator("file")
    @classmethod
    def _inside_target(cls, v: str) -> str:
        p = Path(v)
        if p.is_absolute() or ".." in p.parts or p.suffix != ".py":
            raise ValueError("must be a .py file inside the target package, as a relative path")
        return v

    @model_validator(mode="after")
    def _changes_something(self) -> Mutant:
        if self.find == self.replace:
            raise ValueError("replace equals find: the mutant would be the kernel itself")
        return self


class Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    target: str = Field(min_length=1)  # the package folder, relative to the catalog file
    gate: list[str] = Field(min_length=1)  # gate files the mutants are run against
    mutants: list[Mutant] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> Catalog:
        seen: set[str] = set()
        for m in self.mutants:
            if m.id in seen:
                raise ValueError(f"mutant id {m.id!r} is declared twice")
            seen.add(m.id)
        return self

    def select(self, ids: list[str] | None) -> list[Mutant]:
        if not ids:
            return list(self.mutants)
        known = {m.id: m for m in self.mutants}
        missing = [i for i in ids if i not in known]
        if missing:
            raise GateFileError(f"no such mutant in the catalog: {', '.join(missing)}")
        return [known[i] for i in ids]


class LoadedCatalog(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: Path
    sha256: str
    catalog: Catalog

    @property
    def root(self) -> Path:
        """The folder `target` and `gate` are relative to: the catalog's own."""
        return self.path.resolve().parent


def _error(doc: LocatedDocument, exc: ValidationError) -> GateFileError:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    where = ".".join(str(p) for p in loc) or "(top level)"
    text = f"unknown key {where!r}" if err["type"] == "extra_forbidden" else f"{where}: {err['msg']}"
    if len(exc.errors()) > 1:
        text += f" (and {len(exc.errors()) - 1} more)"
    return doc.error(loc, text)


def load_catalog(path: str | Path) -> LoadedCatalog:
    """Parse and validate a catalog; GateFileError with file:line:col on the first problem."""
    doc = load_yaml(path)
    try:
        catalog = Catalog.model_validate(doc.data)
    except ValidationError as exc:
        raise _error(doc, exc) from None
    loaded = LoadedCatalog(path=Path(path), sha256=sha256_file(path), catalog=catalog)
    target = loaded.root / catalog.target
    if not (target / "__init__.py").is_file():
        raise doc.error(("target",), f"target {catalog.target!r} is not a package folder under {loaded.root}")
    for i, gate in enumerate(catalog.gate):
        if not (loaded.root / gate).is_file():
            raise doc.error(("gate", i), f"gate file {gate!r} not found under {loaded.root}")
    for i, m in enumerate(catalog.mutants):
        if not (target / m.file).is_file():
            raise doc.error(("mutants", i, "file"), f"mutant {m.id}: {m.file!r} is not a file of {catalog.target}")
    return loaded
