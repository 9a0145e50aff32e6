"""The gate-kind registry: kinds come from entry points, load lazily, and are checked as they load."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from pydantic import BaseModel

from qualify.registry import ENTRY_POINT_GROUP, GateKindRegistry, GateKindSpec, default_registry
from qualify.schema.models import KindParams, MeasurementModel

REPO = Path(__file__).resolve().parents[2]


class _Params(KindParams):
    x: int


class _Measured(MeasurementModel):
    x: int


GOOD = GateKindSpec(name="good", params=_Params, measurements=_Measured, runner="m:run", protects="p")
NOT_PARAMS = GateKindSpec(name="bad", params=BaseModel, measurements=_Measured, runner="m:run", protects="p")  # type: ignore[arg-type]
WRONG_NAME = GateKindSpec(name="other", params=_Params, measurements=_Measured, runner="m:run", protects="p")


def _ep(name: str, attr: str) -> EntryPoint:
    return EntryPoint(name=name, value=f"{__name__}:{attr}", group=ENTRY_POINT_GROUP)


def test_builtin_and_plugin_kinds_come_from_entry_points() -> None:
    names = default_registry().names()
    assert {"loss_increase", "accuracy_floor", "kernel_numerics", "perf_nonregression", "compare"} <= set(names)


def test_a_kind_is_loaded_only_when_asked_for() -> None:
    registry = GateKindRegistry([_ep("good", "GOOD"), _ep("bad", "NOT_PARAMS")])
    assert "bad" in registry and registry.get("good") is GOOD  # "bad" not loaded yet, so not yet refused
    with pytest.raises(TypeError, match="params must subclass KindParams"):
        registry.get("bad")


def test_collisions_name_both_sources() -> None:
    with pytest.raises(ValueError, match=r"registered twice \(entry point .*:GOOD and entry point .*:WRONG_NAME\)"):
        GateKindRegistry([_ep("good", "GOOD"), _ep("good", "WRONG_NAME")])
    registry = GateKindRegistry([_ep("good", "GOOD")])
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(GOOD)


def test_an_entry_point_must_load_the_kind_it_names() -> None:
    with pytest.raises(ValueError, match="names must agree"):
        GateKindRegistry([_ep("good", "WRONG_NAME")]).get("good")


def test_an_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="unknown gate kind 'nope'; known kinds: bad, good"):
        GateKindRegistry([_ep("good", "GOOD"), _ep("bad", "NOT_PARAMS")]).get("nope")


def test_lint_imports_neither_torch_nor_a_runner() -> None:
    # An envelope gate is expanded against the kernel's dispatch table (cartridge_attn.heuristics / .dispatch),
    # which is plain Python: the kernel itself (and torch, triton) stays unimported.
    heavy = "('torch', 'triton', 'cartridge_attn._kernel', 'cartridge_attn.api')"
    code = (
        "import sys; from qualify.cli import main; code = main(['lint', *sys.argv[1:]]); "
        f"bad = sorted(m for m in sys.modules if m in {heavy} or m.endswith('.runner')); "
        "print('IMPORTED', bad); raise SystemExit(code)"
    )
    gates = sorted(str(p) for p in (REPO / "gates").glob("*.yaml"))
    done = subprocess.run([sys.executable, "-c", code, *gates], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert "IMPORTED []" in done.stdout
