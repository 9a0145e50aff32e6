"""qualify.serve.engine.startup_phases: vLLM's own start-up timings are kept, also when vLLM is first imported
inside the block and configures its loggers there (as it does when the engine is built)."""

from __future__ import annotations

import importlib
import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from qualify.serve.engine import startup_phases

# What vllm.logger does on import: dictConfig of the `vllm` logger, which drops that logger's handlers.
FAKE_VLLM_LOGGER = textwrap.dedent(
    """
    from logging.config import dictConfig

    dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"vllm": {"class": "logging.NullHandler"}},
        "loggers": {"vllm": {"handlers": ["vllm"], "level": "INFO", "propagate": False}},
    })
    """
)


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pkg = tmp_path / "vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "logger.py").write_text(FAKE_VLLM_LOGGER)
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    log = logging.getLogger("vllm")
    saved = (log.handlers[:], log.level, log.propagate)
    yield
    log.handlers[:], log.level, log.propagate = saved


def test_timing_lines_are_kept_when_vllm_configures_its_loggers_inside_the_block(fake_vllm: None) -> None:
    core = logging.getLogger("vllm.v1.engine.core")
    with startup_phases() as lines:
        importlib.import_module("vllm.logger")  # building the engine imports vLLM for the first time here
        core.info("init engine (profile, create kv cache, warmup model) took %.2f s", 9.5)
        core.info("Using max model len %d", 2048)
        logging.getLogger("vllm.compilation.backends").info("Compiling a graph for compile range (1, 16384)")
    core.info("after the block: model loading took 1.0 s")
    assert lines == ["init engine (profile, create kv cache, warmup model) took 9.50 s"]
