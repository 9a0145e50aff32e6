"""The vLLM-side modules of qualify.serve import vLLM, which CPU hosts lack: check what can be checked here."""

from __future__ import annotations

import py_compile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "qualify" / "serve"
MODULES = sorted(p.name for p in SERVE.glob("*.py"))


def test_the_vllm_side_modules_are_there() -> None:
    assert {"plugin.py", "backend.py", "connector.py", "model.py", "config.py", "store.py"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_module_compiles(name: str, tmp_path: Path) -> None:
    py_compile.compile(str(SERVE / name), cfile=str(tmp_path / f"{name}c"), doraise=True)


def test_vllm_general_plugin_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    plugins = project.get("entry-points", {}).get("vllm.general_plugins", {})
    assert "qualify.serve.plugin:register" in plugins.values(), plugins
    source = (SERVE / "plugin.py").read_text()
    assert "def register(" in source
