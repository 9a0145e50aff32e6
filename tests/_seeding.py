"""One seed per test session, printed and replayable: ``QUALIFY_TEST_SEED=N pytest ...`` repeats a run.

The session seed comes from ``QUALIFY_TEST_SEED`` or, when unset, from the OS; either way it is written
back into the environment so that xdist workers and the pytest subprocesses some tests start draw the same
numbers. Each test's seed is derived from the session seed and the test's node id, so it does not depend on
which other tests ran or in what order (replaying one test alone gives it the same numbers).
"""

from __future__ import annotations

import hashlib
import os
import secrets

SEED_ENV = "QUALIFY_TEST_SEED"


def session_seed() -> int:
    raw = os.environ.get(SEED_ENV, "").strip()
    if raw:
        try:
            return int(raw, 0)
        except ValueError:
            raise ValueError(f"{SEED_ENV}={raw!r}: expected an integer seed") from None
    seed = secrets.randbits(32)
    os.environ[SEED_ENV] = str(seed)
    return seed


def derived_seed(key: str, bits: int = 31) -> int:
    """A seed for ``key`` (a test node id, or a module name for collection-time draws) in [0, 2**bits)."""
    digest = hashlib.sha256(f"{session_seed()}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % (1 << bits)


_current: list[int] = []  # the running test's seed, set by tests/conftest.py before each test
_draws = [0]


def start_test(seed: int) -> None:
    _current[:] = [seed]
    _draws[0] = 0


def seeded_rng():  # -> numpy.random.Generator (numpy imported lazily: the seed helpers above need none)
    """A NumPy generator for the running test, for helpers that have no fixture: the n-th call in a test
    returns the same stream for the same test seed."""
    import numpy as np

    if not _current:
        raise RuntimeError("seeded_rng() outside a test (tests/conftest.py sets the test seed)")
    _draws[0] += 1
    return np.random.default_rng([_current[0], _draws[0]])
