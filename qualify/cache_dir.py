"""Where cartridge-qualify keeps files it can make again (converted models, random cartridges of a benchmark)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "QUALIFY_CACHE_DIR"


def cache_root() -> Path:
    """``$QUALIFY_CACHE_DIR``, else ``~/.cache/cartridge-qualify``."""
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "cartridge-qualify"
