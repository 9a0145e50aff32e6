"""The conversion cache: keyed by content, complete or absent. The converter itself is stubbed here;
the slow test in test_smollm2.py runs the real one."""

from __future__ import annotations

import json
import random

import pytest

from qualify.errors import DataError
from qualify.hashing import sha256_file
from qualify.models import gguf_cache


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("QUALIFY_CACHE_DIR", str(root))
    return root


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(random.randbytes(256))
    return path


def fake_convert(calls):
    def convert(src, out):
        calls.append(src)
        (out / "config.json").write_text("{}")

    return convert


def test_converts_once_then_reuses(cache_dir, gguf, monkeypatch):
    calls: list = []
    monkeypatch.setattr(gguf_cache, "_convert", fake_convert(calls))
    first = gguf_cache.converted_gguf(gguf)
    assert first.converted_now and calls == [gguf]
    digest = sha256_file(gguf)
    assert first.gguf_sha256 == digest
    assert first.directory == cache_dir / "models" / f"m-{digest[:16]}"
    record = json.loads((first.directory / "qualify-conversion.json").read_text())
    assert record["gguf_sha256"] == digest and record["conversion_seconds"] >= 0
    second = gguf_cache.converted_gguf(gguf)
    assert not second.converted_now and calls == [gguf]
    assert second.directory == first.directory


def test_changed_gguf_gets_its_own_entry(cache_dir, gguf, monkeypatch):
    calls: list = []
    monkeypatch.setattr(gguf_cache, "_convert", fake_convert(calls))
    first = gguf_cache.converted_gguf(gguf)
    gguf.write_bytes(random.randbytes(256))
    second = gguf_cache.converted_gguf(gguf)
    assert second.directory != first.directory and len(calls) == 2


def test_interrupted_conversion_leaves_nothing(cache_dir, gguf, monkeypatch):
    def dies_halfway(src, out):
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_cache, "_convert", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        gguf_cache.converted_gguf(gguf)
    assert list((cache_dir / "models").iterdir()) == []

    calls: list = []
    monkeypatch.setattr(gguf_cache, "_convert", fake_convert(calls))
    assert gguf_cache.converted_gguf(gguf).converted_now


def test_entry_without_record_is_not_trusted(cache_dir, gguf, monkeypatch):
    stale = cache_dir / "models" / f"m-{sha256_file(gguf)[:16]}"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"stale")
    calls: list = []
    monkeypatch.setattr(gguf_cache, "_convert", fake_convert(calls))
    result = gguf_cache.converted_gguf(gguf)
    assert result.converted_now and not (stale / "model.safetensors").exists()


def test_missing_gguf(cache_dir, tmp_path):
    with pytest.raises(DataError, match="GGUF file not found"):
        gguf_cache.converted_gguf(tmp_path / "none.gguf")
