from __future__ import annotations

import pytest

from qualify.registry import default_registry


@pytest.fixture(scope="session", autouse=True)
def fake_kind_installed() -> None:
    """The backbone tests use the plug-in kind `compare` (tests/plugins/qualify_fake_kind), found by entry point."""
    if "compare" not in default_registry():
        pytest.fail("install the test kind first: pip install --no-deps -e tests/plugins/qualify_fake_kind")
