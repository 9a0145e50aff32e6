"""Hostile cartridge files: each is a `CartridgeError` naming the file and the field, before any tensor is
allocated, in a child that a regression cannot take the machine down with."""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from _hostile import QUICK_S, TORCH_MEMORY, run_child
from safetensors.torch import save_file

LOADER = Path(__file__).with_name("_load_cartridge.py")
# torch's import dominates the child's time; the load itself must be quick (checked from its own clock).
TORCH_TIMEOUT_S = 120


def raw_safetensors(header: object, data: bytes = b"", header_bytes: bytes | None = None) -> bytes:
    body = json.dumps(header).encode() if header_bytes is None else header_bytes
    return len(body).to_bytes(8, "little") + body + data


def entry(dtype: str = "F32", shape: list[int] | None = None, offsets: list[int] | None = None) -> dict:
    return {"dtype": dtype, "shape": shape or [1, 1, 1, 2], "data_offsets": offsets or [0, 8]}


def pair(**kw: object) -> dict:
    """trainable_keys.0 and trainable_values.0, both 8 bytes, the second after the first."""
    return {"trainable_keys.0": entry(**kw), "trainable_values.0": entry(**{**kw, "offsets": [8, 16]})}  # type: ignore[arg-type]


def huge_index(path: Path) -> None:
    # A few bytes of tensors; the last layer index claims 50,000,001 layers (a 4 GB set of indices).
    t = torch.zeros(1, 1, 1, 2)
    names = ["trainable_keys.0", "trainable_values.0", "trainable_keys.50000000", "trainable_values.50000000"]
    save_file({name: t.clone() for name in names}, str(path))


def fp8_pt(path: Path) -> None:
    t = torch.zeros(1, 1, 2, 4).to(torch.float8_e4m3fn)
    torch.save({"trainable_keys": [t], "trainable_values": [t.clone()]}, path)


def compressed_pt(path: Path) -> None:
    # torch.save stores members; the same archive deflated is how a zip bomb would arrive.
    plain = path.with_suffix(".plain")
    torch.save({"trainable_keys": [torch.zeros(1, 1, 2, 4)], "trainable_values": [torch.zeros(1, 1, 2, 4)]}, plain)
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    plain.unlink()


def writer(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


CASES: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "list_header": (
        ".safetensors",
        writer(raw_safetensors([entry()], bytes(16))),
        "safetensors header is a JSON list, expected an object",
    ),
    "missing_data_offsets": (
        ".safetensors",
        writer(raw_safetensors({"trainable_keys.0": {"dtype": "F32", "shape": [1, 1, 1, 2]}}, bytes(8))),
        "safetensors header entry 'trainable_keys.0' lacks data_offsets",
    ),
    "huge_index": (".safetensors", huge_index, "layer index 50000000 is not below the 4 tensors in the file"),
    "fp8_dtype": (
        ".safetensors",
        writer(raw_safetensors(pair(dtype="F8_E4M3", shape=[1, 1, 2, 4]), bytes(16))),
        "field dtype is F8_E4M3; a cartridge is stored as BF16, F16, F32, F64",
    ),
    "unknown_dtype": (
        ".safetensors",
        writer(raw_safetensors(pair(dtype="F12"), bytes(16))),
        "field dtype 'F12' is not a safetensors dtype",
    ),
    "offsets_past_eof": (
        ".safetensors",
        writer(raw_safetensors(pair(), bytes(12))),
        r"truncated file: tensor data needs 16 bytes, file has 12 \(field data_offsets of 'trainable_values.0'\)",
    ),
    "offsets_far_past_eof": (
        ".safetensors",
        writer(raw_safetensors({"trainable_keys.0": entry(offsets=[2**62, 2**62 + 8])}, bytes(8))),
        "truncated file: tensor data needs 4611686018427387912 bytes, file has 8",
    ),
    "shape_offsets_disagree": (
        ".safetensors",
        writer(raw_safetensors({"trainable_keys.0": entry(shape=[1 << 40, 1 << 40], offsets=[0, 8])}, bytes(8))),
        r"field shape \[1099511627776, 1099511627776\] of F32 needs more than 8 bytes, data_offsets give 8",
    ),
    "negative_offsets": (
        ".safetensors",
        writer(raw_safetensors({"trainable_keys.0": entry(offsets=[8, 0])}, bytes(8))),
        r"field data_offsets must be \[begin, end\] with 0 <= begin <= end",
    ),
    "deep_header": (
        ".safetensors",
        writer(raw_safetensors(None, header_bytes=b"[" * 100_000 + b"]" * 100_000)),
        "safetensors header nests too deep",
    ),
    "unterminated_string_in_header": (
        ".safetensors",
        writer(raw_safetensors(None, header_bytes=b'{"trainable_keys.0": "' + b'\\"' * 100_000)),
        "safetensors header is not JSON",
    ),
    "huge_number_in_header": (
        ".safetensors",
        writer(raw_safetensors(None, header_bytes=b'{"trainable_keys.0": {"shape": [' + b"9" * 5000 + b"]}}")),
        "safetensors header is not JSON",
    ),
    "fp8_pt": (".pt", fp8_pt, r"trainable_keys\[0\] has dtype torch.float8_e4m3fn; a cartridge is stored as"),
    "compressed_pt": (".pt", compressed_pt, "archive member '.*' is compressed"),
}


def load_in_child(path: Path) -> tuple[int, str, float]:
    outcome = run_child([str(LOADER), str(path)], path.parent, timeout=TORCH_TIMEOUT_S, memory=TORCH_MEMORY)
    assert "Traceback" not in outcome.output, outcome.output[-3000:]
    match = re.search(r"^seconds: ([0-9.]+)$", outcome.stdout, re.M)
    assert match, outcome.output[-3000:]
    return outcome.code, outcome.stdout, float(match.group(1))


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_cartridge_is_a_cartridge_error(tmp_path: Path, name: str) -> None:
    suffix, write, expected = CASES[name]
    path = tmp_path / f"{name}{suffix}"
    write(path)
    assert path.stat().st_size < 256 << 10  # small files: the danger is in what they claim
    code, stdout, seconds = load_in_child(path)
    assert code == 3, stdout
    line = next(ln for ln in stdout.splitlines() if ln.startswith("CartridgeError: "))
    assert line.startswith(f"CartridgeError: {path}: "), line
    assert re.search(expected, line), line
    assert seconds < QUICK_S


def test_the_harness_loads_a_valid_cartridge(tmp_path: Path) -> None:
    # Control: the same child reports `loaded` for a good file, so a refusal above is the loader's doing.
    t = torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16)
    save_file({"trainable_keys.0": t, "trainable_values.0": t.clone()}, str(tmp_path / "ok.safetensors"))
    code, stdout, _ = load_in_child(tmp_path / "ok.safetensors")
    assert code == 0 and "loaded" in stdout, stdout
