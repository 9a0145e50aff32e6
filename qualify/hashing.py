"""SHA-256 digests as lowercase hex, the form in-toto subjects and report fields use."""

from __future__ import annotations

import hashlib
import os

# Large enough to keep syscall overhead negligible, small enough that multi-GB cartridges never
# have to fit in memory.
_CHUNK_BYTES = 1 << 20


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's contents, read in chunks. OSError (missing file, ...) propagates."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
