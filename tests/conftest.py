"""Suite-wide test hygiene: every random draw replayable, every write under a temporary directory.

* Seeds. The session seed is printed in the header and, with each failure, next to the failing test's own
  seed; ``QUALIFY_TEST_SEED=<session seed> pytest <node id>`` replays the failure (see tests/_seeding.py).
  Before every test the global RNGs (``random``, NumPy's legacy global, torch's CPU and CUDA generators) are
  seeded from the test's seed; tests that make their own generator take the ``test_seed`` fixture. Hypothesis
  gets the session seed as its ``--hypothesis-seed`` unless one is given.
* Caches. ``~/.cache/cartridge-qualify`` (the converted SmolLM2, through QUALIFY_CACHE_DIR) and the Hugging
  Face, Triton, Hypothesis and vLLM caches go to one directory per session, so the suite never writes into the
  user's home or the work tree. The directory lives for the whole session, so the model is converted once per
  session, not once per test; set QUALIFY_TEST_CACHE_DIR to a directory to keep the conversion between
  sessions (CI may cache that path).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _seeding import SEED_ENV, derived_seed, session_seed, start_test

try:
    import torch
except ImportError:  # nox -s signoff runs the browser test in a venv without torch
    torch = None

pytest_plugins = ["pytester"]

# Redirected to the session directory unless the caller set them explicitly.
CACHE_VARIABLES = {
    "QUALIFY_CACHE_DIR": "cartridge-qualify",
    "HF_HOME": "huggingface",
    "HF_DATASETS_CACHE": "huggingface/datasets",
    "TRITON_CACHE_DIR": "triton",
    # Else .hypothesis/ in the work tree. With the seed forced (below) Hypothesis keeps no example database, so
    # a failure is replayed by the printed seed, not from a saved example.
    "HYPOTHESIS_STORAGE_DIRECTORY": "hypothesis",
    "VLLM_CACHE_ROOT": "vllm",
    "VLLM_CONFIG_ROOT": "vllm-config",
}
_SESSION_CACHE = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)  # before hypothesis's own pytest_configure reads --hypothesis-seed
def pytest_configure(config: pytest.Config) -> None:
    seed = session_seed()  # fixes the seed (and exports it to workers and subprocesses) before any collection
    # Hypothesis draws from its own RNG: give it the session seed too, so the printed seed replays it.
    if getattr(config.option, "hypothesis_seed", "absent") is None:
        config.option.hypothesis_seed = seed
    # tests/benchmarks run once as plain tests unless timing is asked for (`nox -s bench`: --benchmark-enable).
    if hasattr(config.option, "benchmark_disable") and not config.option.benchmark_enable:
        config.option.benchmark_disable = True
    keep = os.environ.get("QUALIFY_TEST_CACHE_DIR")
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="qualify-test-cache-"))
    root.mkdir(parents=True, exist_ok=True)
    if not keep:
        config.stash[_SESSION_CACHE] = root
    for name, sub in CACHE_VARIABLES.items():
        if name not in os.environ:
            os.environ[name] = str(root / sub)


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(_SESSION_CACHE, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> str:
    return f"test seed: {SEED_ENV}={session_seed()} (set it to replay this run's random inputs)"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int) -> None:
    if terminalreporter.stats.get("failed") or terminalreporter.stats.get("error"):
        terminalreporter.write_line(f"replay this run's random inputs with {SEED_ENV}={session_seed()}")


@pytest.fixture
def test_seed(request: pytest.FixtureRequest) -> int:
    """This test's seed: fresh each session, the same for the same session seed and node id."""
    return derived_seed(request.node.nodeid)


@pytest.fixture(autouse=True)
def _seed_global_rngs(test_seed: int) -> Iterator[None]:
    start_test(test_seed)  # for _seeding.seeded_rng(), which helpers without fixtures use
    random.seed(test_seed)
    np.random.seed(test_seed)  # the legacy global, for code that still draws from it
    if torch is not None:
        torch.manual_seed(test_seed)  # also seeds every CUDA device
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report = yield
    if report.failed:
        report.sections.append(
            (
                "test seed",
                f"this test's seed {derived_seed(item.nodeid)}; replay with "
                f"{SEED_ENV}={session_seed()} pytest '{item.nodeid}'",
            )
        )
    return report
