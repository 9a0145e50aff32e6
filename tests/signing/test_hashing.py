from __future__ import annotations

import hashlib

from qualify.hashing import sha256_bytes, sha256_file


def test_sha256_bytes_known_value():
    assert sha256_bytes(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_sha256_file_matches_bytes_across_chunk_boundaries(tmp_path):
    data = bytes(range(256)) * 9000  # > 2 MiB: several chunks, the last one partial
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest() == sha256_bytes(data)


def test_sha256_file_of_empty_file(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert sha256_file(str(path)) == hashlib.sha256(b"").hexdigest()
