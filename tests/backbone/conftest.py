from __future__ import annotations

import pytest
from _fake_kind import COMPARE

import qualify.kinds


@pytest.fixture
def fake_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the test-only `compare` kind beside the built-in ones."""
    monkeypatch.setattr(qualify.kinds, "BUILTIN_KINDS", (*qualify.kinds.BUILTIN_KINDS, COMPARE))
