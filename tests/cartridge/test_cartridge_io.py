from __future__ import annotations

import pickle

import pytest
import torch

from qualify.cartridge.io import load_cartridge, save_cartridge
from qualify.errors import CartridgeError


def assert_same(a, b) -> None:
    assert a.frozen_tokens == b.frozen_tokens
    assert len(a.keys) == len(b.keys)
    for x, y in zip(a.keys + a.values, b.keys + b.values, strict=True):
        assert x.dtype == y.dtype
        assert torch.equal(x, y)


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_save_load_roundtrip_is_exact(tmp_path, random_cartridge, suffix, dtype):
    c = random_cartridge(dtype=dtype)
    path = save_cartridge(c, tmp_path / f"c{suffix}")
    loaded = load_cartridge(path)
    assert_same(loaded, c)
    assert loaded.source == str(path)


@pytest.mark.parametrize("frozen_name", ["fixed", "frozen"])
@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_reference_layout_normalizes_to_t_h_d_with_frozen_first(
    tmp_path, random_cartridge, as_reference, write_reference, frozen_name, suffix
):
    c = random_cartridge(frozen=None)
    raw = as_reference(c, frozen_name)
    path = write_reference(raw, tmp_path / f"ref{suffix}")
    loaded = load_cartridge(path)
    assert_same(loaded, c)
    # Spot-check the axis mapping on one element: (1, H, T, D)[0, h, t, d] == (T, H, D)[t + frozen, h, d].
    f = c.frozen_tokens
    t, h, d = c.num_tokens - f - 1, c.shape.num_kv_heads - 1, c.shape.head_dim - 1
    assert loaded.keys[-1][t + f, h, d] == raw["trainable_keys"][-1][0, h, t, d]


def test_checkpoint_nested_under_cache_and_without_frozen_prefix(tmp_path, random_cartridge, as_reference):
    c = random_cartridge(frozen=0)
    raw = as_reference(c)
    del raw["fixed_keys"], raw["fixed_values"]
    torch.save({"cache": raw, "step": 7}, tmp_path / "c.pt")
    assert_same(load_cartridge(tmp_path / "c.pt"), c)


def test_empty_frozen_lists_mean_no_frozen_tokens(tmp_path, random_cartridge, as_reference):
    # The reference implementation saves empty fixed_* lists when nothing is frozen.
    c = random_cartridge(frozen=0)
    raw = as_reference(c) | {"fixed_keys": [], "fixed_values": []}
    torch.save(raw, tmp_path / "c.pt")
    assert load_cartridge(tmp_path / "c.pt").frozen_tokens == 0


def problem(path) -> str:
    with pytest.raises(CartridgeError) as info:
        load_cartridge(path)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    return info.value.problem


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_missing_file(tmp_path, suffix):
    assert problem(tmp_path / f"nope{suffix}") == "file not found"


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_empty_file(tmp_path, suffix):
    path = tmp_path / f"empty{suffix}"
    path.write_bytes(b"")
    assert problem(path) == "file is empty (0 bytes)"


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_truncated_file(tmp_path, random_cartridge, suffix, gen):
    path = save_cartridge(random_cartridge(), tmp_path / f"c{suffix}")
    data = path.read_bytes()
    # Anywhere past the first bytes; the archive directory / tensor data at the end goes missing.
    for cut in torch.randint(16, len(data) - 1, (8,), generator=gen).tolist():
        path.write_bytes(data[:cut])
        assert problem(path).startswith("truncated file"), cut


def test_a_safetensors_file_cut_just_after_its_header_is_truncated(tmp_path, random_cartridge):
    # Few data bytes left: each tensor's shape is checked against its own byte range, not against what the
    # file still holds, or the cut reads as an inconsistent header (seen in CI with a cut at byte 388).
    path = save_cartridge(random_cartridge(), tmp_path / "c.safetensors")
    data = path.read_bytes()
    data_start = 8 + int.from_bytes(data[:8], "little")
    for extra in (0, 1, 7, 64):
        path.write_bytes(data[: data_start + extra])
        assert problem(path).startswith("truncated file: tensor data needs"), extra


def test_flipped_byte_in_tensor_data_is_corrupt(tmp_path, random_cartridge, gen):
    c = random_cartridge(dtype=torch.float32)
    path = save_cartridge(c, tmp_path / "c.pt")
    data = bytearray(path.read_bytes())
    needle = c.keys[0].permute(1, 0, 2).contiguous().numpy().tobytes()[:8]
    at = bytes(data).find(needle)
    assert at > 0
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    assert problem(path).startswith("corrupt checkpoint: CRC mismatch in archive member")


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_text_file_is_not_a_checkpoint(tmp_path, suffix):
    path = tmp_path / f"notes{suffix}"
    path.write_text("These are not the tensors you are looking for.\n" * 3)
    assert problem(path).startswith("not a checkpoint")


def test_pickle_refused_by_weights_only(tmp_path, random_cartridge):
    # The reference implementation pickles nn.ParameterList, which weights_only refuses.
    c = random_cartridge()
    obj = {
        "trainable_keys": torch.nn.ParameterList([torch.nn.Parameter(k) for k in c.keys]),
        "trainable_values": torch.nn.ParameterList([torch.nn.Parameter(v) for v in c.values]),
    }
    torch.save(obj, tmp_path / "c.pt")
    text = problem(tmp_path / "c.pt")
    assert "weights_only=True) refused it" in text


@pytest.mark.parametrize("legacy", [True, False], ids=["legacy-torch-format", "plain-pickle"])
def test_legacy_pickle_of_arbitrary_object_is_refused(tmp_path, random_cartridge, legacy):
    path = tmp_path / "c.pt"
    if legacy:  # a real tensor checkpoint in the pre-zip format: refused before torch sees it
        torch.save({"trainable_keys": random_cartridge().keys}, path, _use_new_zipfile_serialization=False)
    else:
        path.write_bytes(pickle.dumps({"trainable_keys": pickle.PickleError("x")}, protocol=4))
    assert problem(path) == (
        "legacy (pre-zip) PyTorch pickle format is not accepted: re-save it with torch.save (zip format)"
    )


def test_top_level_not_a_dict(tmp_path, gen):
    torch.save(torch.randn(3, 4, generator=gen), tmp_path / "c.pt")
    assert problem(tmp_path / "c.pt") == ("not a checkpoint: top-level object is Tensor, expected a dict of KV lists")


@pytest.mark.parametrize("drop", [["trainable_values"], ["trainable_keys", "trainable_values"], ["fixed_values"]])
def test_missing_keys_are_named(tmp_path, random_cartridge, as_reference, drop):
    raw = as_reference(random_cartridge())
    for key in drop:
        del raw[key]
    torch.save(raw, tmp_path / "c.pt")
    assert problem(tmp_path / "c.pt").startswith(f"missing keys: {', '.join(drop)} (present:")


def test_safetensors_without_cartridge_names(tmp_path, gen):
    from safetensors.torch import save_file

    save_file({"weight": torch.randn(2, 2, generator=gen)}, str(tmp_path / "c.safetensors"))
    assert "no tensors named trainable_keys" in problem(tmp_path / "c.safetensors")


def test_safetensors_with_a_layer_gap(tmp_path, random_cartridge, as_reference, write_reference):
    raw = as_reference(random_cartridge(layers=3, frozen=0))
    flat_path = write_reference(raw, tmp_path / "c.safetensors")
    from safetensors.torch import load_file, save_file

    flat = load_file(str(flat_path))
    del flat["trainable_values.1"]
    save_file(flat, str(flat_path))
    assert problem(flat_path) == "missing layers [1] in trainable_values.<layer>"


def test_ragged_token_counts_across_layers(tmp_path, random_cartridge, as_reference):
    c = random_cartridge(layers=3, tokens=10, frozen=1)
    raw = as_reference(c)
    raw["trainable_keys"][2] = raw["trainable_keys"][2][:, :, :-1]
    raw["trainable_values"][2] = raw["trainable_values"][2][:, :, :-1]
    torch.save(raw, tmp_path / "c.pt")
    text = problem(tmp_path / "c.pt")
    assert text.startswith("ragged layers: layer 2 has (T, H, D) = (9,")


def test_ragged_k_v_mismatch(tmp_path, random_cartridge, as_reference):
    raw = as_reference(random_cartridge(layers=2, tokens=8, frozen=0))
    raw["trainable_values"][1] = raw["trainable_values"][1][:, :, :-2]
    torch.save(raw, tmp_path / "c.pt")
    assert problem(tmp_path / "c.pt").startswith("ragged layers: layer 1 K has shape (8,")


def test_ragged_layer_counts(tmp_path, random_cartridge, as_reference):
    raw = as_reference(random_cartridge(layers=3))
    raw["trainable_values"] = raw["trainable_values"][:2]
    torch.save(raw, tmp_path / "c.pt")
    assert problem(tmp_path / "c.pt").startswith("ragged layers: the KV lists have different layer counts")


def test_ragged_frozen_prefix_heads(tmp_path, random_cartridge, as_reference):
    raw = as_reference(random_cartridge(heads=2, frozen=1))
    raw["fixed_keys"][0] = raw["fixed_keys"][0][:, :1]
    torch.save(raw, tmp_path / "c.pt")
    assert "frozen prefix has (H, D)" in problem(tmp_path / "c.pt")


def test_wrong_rank_and_dtype(tmp_path, random_cartridge, as_reference):
    raw = as_reference(random_cartridge(frozen=0))
    raw["trainable_keys"][0] = raw["trainable_keys"][0][0]
    torch.save(raw, tmp_path / "a.pt")
    assert "trainable_keys[0] has shape" in problem(tmp_path / "a.pt")
    raw = as_reference(random_cartridge(frozen=0))
    raw["trainable_values"][0] = raw["trainable_values"][0].to(torch.int32)
    torch.save(raw, tmp_path / "b.pt")
    assert "expected a float dtype" in problem(tmp_path / "b.pt")


def test_no_layers(tmp_path):
    torch.save({"trainable_keys": [], "trainable_values": []}, tmp_path / "c.pt")
    assert problem(tmp_path / "c.pt") == "no layers: trainable_keys is empty"
