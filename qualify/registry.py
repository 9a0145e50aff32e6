"""The typed registry of gate kinds, filled from the `qualify.gate_kinds` entry points.

A gate kind is one package (fields and lint, runner, typed measurements, render hook); it registers
itself with one entry point, ``<kind name> = "<package>:SPEC"``, in its distribution's metadata. The
built-in kinds are declared that way in this project's pyproject.toml and third-party kinds the same way,
so this module names none of them and imports none at load: a kind's package is imported the first time
its spec is asked for, and its runner and render hook only when an item runs or a report is rendered.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from qualify.schema.models import KindParams, MeasurementModel

if TYPE_CHECKING:
    from qualify.context import RunContext
    from qualify.gate import GateFile, GateItem
    from qualify.results import Check, ItemOutcome

ENTRY_POINT_GROUP = "qualify.gate_kinds"


@dataclass(frozen=True)
class LintIssue:
    """A semantic problem in one gate; `field` is a path below the gate (e.g. ("workload",))."""

    field: tuple[str | int, ...]
    message: str
    severity: str = "error"


def _load(reference: str) -> Any:
    module_name, _, attr = reference.partition(":")
    return getattr(importlib.import_module(module_name), attr)


@dataclass(frozen=True)
class GateKindSpec:
    """Everything the core needs to know about one gate kind.

    Parameters
    ----------
    name
        The `kind:` value in gate files, and the entry point's name.
    params
        The kind's gate fields (validated strictly when a gate file is compiled).
    measurements
        The typed measurements of one item; the report schema references its JSON schema.
    runner
        ``"module:function"`` taking ``(GateItem, RunContext)`` and returning an ItemOutcome. Imported only
        when an item of this kind runs, so collecting and linting never import torch or touch a GPU.
    protects
        One sentence on what the kind protects, the default description of its gates.
    lint
        Semantic checks of one gate's fields against its gate file (after schema validation).
    render
        ``"module:attribute"`` naming the kind's render hook (`qualify.render.blocks.KindRender`), imported
        only when a report is rendered; None renders the kind's items through the generic gate tables only.
    primary_check
        Which check is an item's headline in the console summary when none failed (a failed one always
        is); None takes the item's first check.
    generate_axes
        ``"module:function"`` taking a gate's kind fields (as written) and returning matrix axes to add, e.g.
        cells derived from a declared envelope; ``{}`` when the gate declares none. ValueError is a gate-file
        error. Imported when a gate of the kind is compiled.
    generate_reads
        The fields ``generate_axes`` reads besides the envelope. A gate whose envelope gives cells must set them
        itself: one from ``defaults`` or a matrix axis would reach the cells but not the generator, whose cells
        would then be the edges of another dispatch than the one they run.
    describe
        ``"module:function"`` taking an item's params and returning what it will exercise in one line (for
        `qualify list`; the numerics kind names the kernel configuration each cell dispatches). Imported only
        when listing.
    worker_group
        Taking an item's params: the name of the run-wide state its items share (a `ctx.memo` store, timed
        worker processes), or None when an item stands alone. Under `qualify run --gpus` the items of one group
        run in one worker, on one GPU (one scope of xdist's scope scheduler); the others are load-balanced.
    shares_gpu
        Whether items of the kind may run beside another worker's on one GPU (`qualify run --gpus ...
        --workers-per-gpu N`): correctness checks of small launches. False (the default) for timed items, whose
        timings a shared GPU would bend, and for engines that take most of a GPU's memory.
    """

    name: str
    params: type[KindParams]
    measurements: type[MeasurementModel]
    runner: str
    protects: str
    lint: Callable[[KindParams, GateFile], list[LintIssue]] | None = None
    render: str | None = None
    primary_check: Callable[[Check], bool] | None = None
    generate_axes: str | None = None
    generate_reads: tuple[str, ...] = ()
    describe: str | None = None
    worker_group: Callable[[KindParams], str | None] | None = None
    shares_gpu: bool = False

    def load_runner(self) -> Callable[[GateItem, RunContext], ItemOutcome]:
        return _load(self.runner)

    def load_render(self) -> Any | None:
        return None if self.render is None else _load(self.render)

    def load_generate_axes(self) -> Callable[[dict[str, Any]], dict[str, list[Any]]] | None:
        return None if self.generate_axes is None else _load(self.generate_axes)

    def load_describe(self) -> Callable[[KindParams], str] | None:
        return None if self.describe is None else _load(self.describe)


def _check_spec(spec: object, origin: str) -> GateKindSpec:
    if not isinstance(spec, GateKindSpec):
        raise TypeError(f"{origin}: a gate kind is a GateKindSpec, got {type(spec).__name__}")
    if not (isinstance(spec.params, type) and issubclass(spec.params, KindParams)):
        raise TypeError(f"gate kind {spec.name!r} ({origin}): params must subclass KindParams, got {spec.params!r}")
    if not (isinstance(spec.measurements, type) and issubclass(spec.measurements, BaseModel)):
        raise TypeError(
            f"gate kind {spec.name!r} ({origin}): measurements must be a pydantic model, got {spec.measurements!r}"
        )
    return spec


class GateKindRegistry:
    """Gate kinds by name. Entry points are read eagerly (names only) and loaded on first use."""

    def __init__(self, entries: Iterable[EntryPoint] = ()) -> None:
        self._pending: dict[str, EntryPoint] = {}
        self._origin: dict[str, str] = {}
        self._kinds: dict[str, GateKindSpec] = {}
        for ep in entries:
            self._claim(ep.name, f"entry point {ep.value}")
            self._pending[ep.name] = ep

    def _claim(self, name: str, origin: str) -> None:
        if name in self._origin:
            raise ValueError(f"gate kind {name!r} is registered twice ({self._origin[name]} and {origin})")
        self._origin[name] = origin

    def register(self, spec: GateKindSpec) -> None:
        """Add an already-built spec (for example a kind defined inside a test)."""
        _check_spec(spec, "registered directly")
        self._claim(spec.name, f"{spec.runner} (registered directly)")
        self._kinds[spec.name] = spec

    def get(self, name: str) -> GateKindSpec:
        if name in self._kinds:
            return self._kinds[name]
        ep = self._pending.get(name)
        if ep is None:
            raise KeyError(f"unknown gate kind {name!r}; known kinds: {', '.join(self.names())}")
        spec = _check_spec(ep.load(), f"entry point {ep.value}")
        if spec.name != name:
            raise ValueError(f"entry point {name!r} ({ep.value}) loads gate kind {spec.name!r}: the names must agree")
        del self._pending[name]
        self._kinds[name] = spec
        return spec

    def __contains__(self, name: object) -> bool:
        return name in self._origin

    def __iter__(self) -> Iterator[GateKindSpec]:
        """Every kind, loaded, in name order."""
        return iter([self.get(name) for name in self.names()])

    def names(self) -> list[str]:
        return sorted(self._origin)


def default_registry() -> GateKindRegistry:
    """A fresh registry of every kind installed distributions declare (this project's included)."""
    return GateKindRegistry(entry_points(group=ENTRY_POINT_GROUP))
