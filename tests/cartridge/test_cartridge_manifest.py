from __future__ import annotations

import json

import pytest
import torch

from qualify.cartridge.io import save_cartridge
from qualify.cartridge.manifest import (
    build_manifest,
    load_verified_cartridge,
    manifest_path,
    read_manifest,
    write_manifest,
)
from qualify.errors import CartridgeError
from qualify.hashing import sha256_file


@pytest.fixture
def saved(tmp_path, random_cartridge, gen):
    suffix = [".pt", ".safetensors"][int(torch.randint(0, 2, (), generator=gen))]
    c = random_cartridge(dtype=torch.bfloat16, frozen=1)
    path = save_cartridge(c, tmp_path / f"cart{suffix}")
    provenance = {"script": "x.py", "seed": int(torch.randint(0, 1000, (), generator=gen))}
    manifest = build_manifest(c, path, cartridge_id="w/run", model_id="m", provenance=provenance)
    write_manifest(manifest, path)
    return c, path, manifest


def test_manifest_records_shape_digest_and_provenance(saved):
    c, path, manifest = saved
    assert manifest_path(path).name == path.name + ".manifest.json"
    back = read_manifest(path)
    assert back == manifest
    assert back.sha256 == sha256_file(path)
    assert (back.num_layers, back.num_kv_heads, back.head_dim) == tuple(c.shape.__dict__.values())
    assert (back.num_tokens, back.frozen_tokens, back.dtype) == (c.num_tokens, 1, "bfloat16")
    assert back.file == path.name
    assert back.provenance == manifest.provenance


def test_verified_load_accepts_matching_files(saved):
    c, path, _ = saved
    loaded, manifest = load_verified_cartridge(path, c.shape)
    assert manifest.id == "w/run"
    assert all(torch.equal(a, b) for a, b in zip(loaded.keys, c.keys, strict=True))


def test_sha256_mismatch_names_the_cartridge(saved, random_cartridge):
    c, path, manifest = saved
    # Same shape, different numbers: only the digest can tell.
    save_cartridge(random_cartridge(len(c.keys), c.shape.num_kv_heads, c.num_tokens, c.shape.head_dim, 1), path)
    with pytest.raises(CartridgeError) as info:
        load_verified_cartridge(path)
    assert info.value.path == str(path)
    assert info.value.problem.startswith(f"sha256 mismatch: manifest says {manifest.sha256}, file has ")


def test_shape_mismatch_with_manifest(saved):
    c, path, _ = saved
    record = json.loads(manifest_path(path).read_text())
    record["num_tokens"] += 1
    record["dtype"] = "float16"
    manifest_path(path).write_text(json.dumps(record))
    with pytest.raises(CartridgeError) as info:
        load_verified_cartridge(path)
    assert info.value.path == str(path)
    assert info.value.problem == (
        f"shape mismatch with manifest: num_tokens: manifest {c.num_tokens + 1}, file {c.num_tokens}; "
        "dtype: manifest float16, file bfloat16"
    )


def test_model_mismatch_is_checked_after_manifest(saved):
    c, path, _ = saved
    wrong = type(c.shape)(c.shape.num_layers + 1, c.shape.num_kv_heads, c.shape.head_dim)
    with pytest.raises(CartridgeError, match="layer count mismatch: model expects"):
        load_verified_cartridge(path, wrong)


def test_missing_and_malformed_manifest(saved):
    _, path, _ = saved
    mpath = manifest_path(path)
    record = json.loads(mpath.read_text())
    mpath.unlink()
    with pytest.raises(CartridgeError) as info:
        load_verified_cartridge(path)
    assert info.value.path == str(mpath)
    assert info.value.problem.startswith("manifest not found")

    del record["sha256"]
    mpath.write_text(json.dumps(record))
    with pytest.raises(CartridgeError) as info:
        read_manifest(path)
    assert info.value.problem == "malformed manifest: sha256: Field required"


def test_missing_cartridge_beside_manifest(saved):
    _, path, _ = saved
    path.unlink()
    with pytest.raises(CartridgeError) as info:
        load_verified_cartridge(path)
    assert (info.value.path, info.value.problem) == (str(path), "file not found")
