"""The typed registry of gate kinds: each kind names its fields model and the runner that executes it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from qualify.schema.models import KindParams

if TYPE_CHECKING:
    from qualify.compile import GateFile, GateItem
    from qualify.results import ItemOutcome
    from qualify.runners.context import RunContext

ENTRY_POINT_GROUP = "qualify.gate_kinds"


@dataclass(frozen=True)
class LintIssue:
    """A semantic problem in one gate; `field` is a path below the gate (e.g. ("workload",))."""

    field: tuple[str | int, ...]
    message: str
    severity: str = "error"


@dataclass(frozen=True)
class GateKindSpec:
    """One gate kind.

    `runner` is "module:function" and is imported only when an item of this kind runs, so collecting
    and linting never import torch or touch a GPU.
    """

    name: str
    params: type[KindParams]
    runner: str
    protects: str
    lint: Callable[[KindParams, GateFile], list[LintIssue]] | None = None

    def load_runner(self) -> Callable[[GateItem, RunContext], ItemOutcome]:
        module_name, _, attr = self.runner.partition(":")
        return getattr(importlib.import_module(module_name), attr)


class GateKindRegistry:
    def __init__(self) -> None:
        self._kinds: dict[str, GateKindSpec] = {}

    def register(self, spec: GateKindSpec) -> None:
        if not issubclass(spec.params, KindParams):
            raise TypeError(f"gate kind {spec.name!r}: params must subclass KindParams, got {spec.params!r}")
        if spec.name in self._kinds:
            raise ValueError(
                f"gate kind {spec.name!r} is registered twice ({self._kinds[spec.name].runner} and {spec.runner})"
            )
        self._kinds[spec.name] = spec

    def get(self, name: str) -> GateKindSpec:
        try:
            return self._kinds[name]
        except KeyError:
            raise KeyError(f"unknown gate kind {name!r}; known kinds: {', '.join(sorted(self._kinds))}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[GateKindSpec]:
        return iter(self._kinds[name] for name in sorted(self._kinds))

    def names(self) -> list[str]:
        return sorted(self._kinds)


def builtin_kinds() -> list[GateKindSpec]:
    from qualify.kinds import BUILTIN_KINDS

    return list(BUILTIN_KINDS)


def default_registry(*, include_plugins: bool = True) -> GateKindRegistry:
    """A fresh registry with the built-in kinds and those other packages declare as entry points."""
    registry = GateKindRegistry()
    for spec in builtin_kinds():
        registry.register(spec)
    if include_plugins:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            loaded: Any = ep.load()
            registry.register(loaded() if callable(loaded) else loaded)
    return registry
