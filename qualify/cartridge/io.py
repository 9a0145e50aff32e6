"""Read and write cartridge files; every failure is a `CartridgeError` naming the file and the problem.

Two on-disk layouts, both holding per-layer tensors of shape (1, H_kv, T, D):

* ``.pt`` — the layout of the Cartridges reference implementation (HazyResearch/cartridges): a dict,
  optionally nested under ``"cache"``, with lists ``trainable_keys`` / ``trainable_values`` and a frozen
  prefix under ``fixed_keys`` / ``fixed_values`` (or ``frozen_keys`` / ``frozen_values``). Frozen tokens
  come first. Loaded only with ``torch.load(weights_only=True)``; the reference saves ``nn.ParameterList``
  objects, which weights_only refuses — re-save those as plain lists of tensors.
* ``.safetensors`` — the same tensors under flat names ``trainable_keys.{layer}``, ``trainable_values.{layer}``,
  ``fixed_keys.{layer}``, ``fixed_values.{layer}`` (``frozen_*`` accepted on read), layers numbered from 0.

Both normalize to `Cartridge`: per layer K and V of shape (T, H_kv, D), frozen tokens first.
"""

from __future__ import annotations

import itertools
import json
import pickle
import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from qualify.cartridge.types import Cartridge
from qualify.errors import CartridgeError
from qualify.json_limits import TooLarge, check_depth

TRAINABLE = ("trainable_keys", "trainable_values")
FROZEN_NAMES = (("fixed_keys", "fixed_values"), ("frozen_keys", "frozen_values"))
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTO = 0x80
_FLAT_NAME = re.compile(r"^(trainable|fixed|frozen)_(keys|values)\.(\d+)$")


def load_cartridge(path: Path | str) -> Cartridge:
    """Read a `.pt` or `.safetensors` cartridge and normalize it; raises `CartridgeError` on any defect."""
    path = Path(path)
    check_file_present(path)
    raw = _read_safetensors(path) if path.suffix == ".safetensors" else _read_torch(path)
    return _normalize(raw, str(path))


def save_cartridge(cartridge: Cartridge, path: Path | str) -> Path:
    """Write `cartridge` in the layout its suffix selects (`.safetensors`, else the reference `.pt`)."""
    path = Path(path)
    frozen = cartridge.frozen_tokens

    # (T, H, D) -> (1, H, T, D) as a fresh copy: torch.save writes a view's whole storage, and
    # `.contiguous()` returns a frozen slice (T=1) as the view it already is.
    def lay(t: torch.Tensor) -> torch.Tensor:
        return t.detach().to("cpu").permute(1, 0, 2).unsqueeze(0).clone(memory_format=torch.contiguous_format)

    parts = {
        "fixed_keys": [lay(k[:frozen]) for k in cartridge.keys],
        "fixed_values": [lay(v[:frozen]) for v in cartridge.values],
        "trainable_keys": [lay(k[frozen:]) for k in cartridge.keys],
        "trainable_values": [lay(v[frozen:]) for v in cartridge.values],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".safetensors":
        flat = {f"{name}.{i}": t for name, tensors in parts.items() for i, t in enumerate(tensors)}
        save_file(flat, str(path), metadata={"format": "cartridges", "frozen_tokens": str(frozen)})
    else:
        torch.save(parts, path)
    return path


def check_file_present(path: Path) -> None:
    if not path.exists():
        raise CartridgeError(str(path), "file not found")
    if not path.is_file():
        raise CartridgeError(str(path), "not a regular file")
    if path.stat().st_size == 0:
        raise CartridgeError(str(path), "file is empty (0 bytes)")


def _read_torch(path: Path) -> object:
    with path.open("rb") as fh:
        head = fh.read(4)
    if head[:1] == bytes([_PICKLE_PROTO]):
        # The legacy format makes torch reserve every storage size the pickle claims before any check, so a
        # few bytes can ask for gigabytes; torch.save has written the zip format since torch 1.6.
        raise CartridgeError(
            str(path),
            "legacy (pre-zip) PyTorch pickle format is not accepted: re-save it with torch.save (zip format)",
        )
    if head != _ZIP_MAGIC:
        raise CartridgeError(str(path), "not a checkpoint: no PyTorch zip header (is it a text or other file?)")
    # Check the archive ourselves first: torch reports truncation as assorted RuntimeErrors and OSErrors.
    _check_zip(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "weights only load failed" in str(exc).lower():
            raise CartridgeError(
                str(path),
                "not a checkpoint that can be loaded safely: torch.load(weights_only=True) refused it "
                "(it pickles objects other than tensors and containers, e.g. nn.ParameterList; "
                "re-save it as plain lists of tensors)",
            ) from None
        raise CartridgeError(str(path), f"truncated or corrupt pickle: {_first_line(exc)}") from None
    except EOFError:
        raise CartridgeError(str(path), "truncated file: unexpected end of pickle data") from None
    except (RuntimeError, OSError, ValueError) as exc:
        raise CartridgeError(str(path), f"corrupt checkpoint: {_first_line(exc)}") from None


def _check_zip(path: Path) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            # torch.save stores members uncompressed; a compressed member could be a zip bomb that
            # testzip below (and torch after it) would inflate in full.
            compressed = next((i.filename for i in archive.infolist() if i.compress_type != zipfile.ZIP_STORED), None)
            if compressed is not None:
                raise CartridgeError(
                    str(path),
                    f"not a PyTorch checkpoint: archive member {compressed[:80]!r} is compressed "
                    "(torch.save stores every member uncompressed)",
                )
            bad = archive.testzip()  # reads every member and checks its CRC
    except zipfile.BadZipFile:
        raise CartridgeError(
            str(path), "truncated file: the zip archive has no central directory (incomplete write or copy?)"
        ) from None
    except (EOFError, OSError) as exc:
        raise CartridgeError(str(path), f"truncated file: {_first_line(exc)}") from None
    if bad is not None:
        raise CartridgeError(str(path), f"corrupt checkpoint: CRC mismatch in archive member {bad!r}")


# Bytes per element of every safetensors dtype, so a header can be checked against the file before any
# tensor is allocated. Only the float dtypes a cartridge is stored in are accepted; FP8 (and FP4) are
# serving layouts that the suite derives from a BF16 cartridge, never an input format.
_SAFETENSORS_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F4": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
_CARTRIDGE_SAFETENSORS_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
_CARTRIDGE_TORCH_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_HEADER_ENTRY_FIELDS = frozenset({"dtype", "shape", "data_offsets"})
# safetensors' own limit; a larger length means the bytes are not a safetensors file at all.
_MAX_HEADER_BYTES = 100 * 1024 * 1024
# A safetensors header is an object of objects holding lists: three levels.
_MAX_HEADER_DEPTH = 3


def _read_safetensors(path: Path) -> dict[str, list[torch.Tensor]]:
    size = path.stat().st_size
    with path.open("rb") as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise CartridgeError(str(path), f"truncated file: {size} bytes, shorter than a safetensors header")
        header_len = int.from_bytes(prefix, "little")
        if header_len > size - 8:
            # A header length beyond the file is how both truncation and non-safetensors bytes look;
            # text files decode to absurdly large lengths, so tell them apart by magnitude.
            if header_len > _MAX_HEADER_BYTES:
                raise CartridgeError(str(path), "not a checkpoint: no safetensors header")
            raise CartridgeError(str(path), f"truncated file: header needs {header_len} bytes, file has {size - 8}")
        header_bytes = fh.read(header_len)
    try:
        # Bounded first: json's parser recurses once per nesting level.
        check_depth(header_bytes, _MAX_HEADER_DEPTH)
        header = json.loads(header_bytes)
    except TooLarge:
        raise CartridgeError(str(path), "not a checkpoint: safetensors header nests too deep") from None
    except (UnicodeDecodeError, ValueError):  # ValueError: also numbers past Python's digit limit
        raise CartridgeError(str(path), "not a checkpoint: safetensors header is not JSON") from None
    _check_safetensors_header(header, size - 8 - header_len, str(path))
    try:
        flat = load_file(str(path))
    except SafetensorError as exc:
        raise CartridgeError(str(path), f"corrupt safetensors file: {_first_line(exc)}") from None
    return _unflatten(flat, str(path))


def _check_safetensors_header(header: object, data_len: int, where: str) -> None:
    """Check every field of a safetensors header against the file before safetensors allocates anything.

    Each tensor's dtype, shape and byte range must be consistent and lie inside the `data_len` bytes
    after the header, and each layer index must be below the number of tensors, so the memory a load
    takes is bounded by the file's size.
    """
    if not isinstance(header, dict):
        raise CartridgeError(where, f"safetensors header is a JSON {type(header).__name__}, expected an object")
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CartridgeError(where, "safetensors header field __metadata__ must map names to strings")
    tensors = {name: entry for name, entry in header.items() if name != "__metadata__"}
    last_end, last_name = 0, ""
    for name, entry in tensors.items():
        field = f"safetensors header entry {name[:80]!r}"
        if not isinstance(entry, dict):
            raise CartridgeError(where, f"{field} is a JSON {type(entry).__name__}, expected an object")
        if set(entry) != _HEADER_ENTRY_FIELDS:
            missing = sorted(_HEADER_ENTRY_FIELDS - set(entry))
            extra = sorted(set(entry) - _HEADER_ENTRY_FIELDS)
            detail = (f"lacks {', '.join(missing)}" if missing else "") + (
                f"{'; ' if missing else ''}has unknown {', '.join(extra)}" if extra else ""
            )
            raise CartridgeError(where, f"{field} {detail} (expected dtype, shape, data_offsets)")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in _CARTRIDGE_SAFETENSORS_DTYPES:
            if dtype in _SAFETENSORS_ITEMSIZE:
                raise CartridgeError(
                    where,
                    f"{field} field dtype is {dtype}; a cartridge is stored as "
                    f"{', '.join(sorted(_CARTRIDGE_SAFETENSORS_DTYPES))} (FP8 layouts are derived when serving)",
                )
            raise CartridgeError(where, f"{field} field dtype {str(dtype)[:40]!r} is not a safetensors dtype")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise CartridgeError(where, f"{field} field shape must be a list of non-negative integers")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise CartridgeError(where, f"{field} field data_offsets must be [begin, end] with 0 <= begin <= end")
        if offsets[1] > last_end:
            last_end, last_name = offsets[1], name
        span, itemsize = offsets[1] - offsets[0], _SAFETENSORS_ITEMSIZE[dtype]
        numel, cut_short = (0 if 0 in shape else 1), False
        for d in shape:
            numel *= d  # Python ints: a hostile shape cannot overflow into a small product
            if numel * itemsize > span:
                # Already more than its own byte range (which the JSON bounds): stop before the product grows huge.
                # Not the file's length: a truncated file must read as truncated, not as an inconsistent header.
                cut_short = True
                break
        if numel * itemsize != span:
            needs = f"more than {span}" if cut_short else str(numel * itemsize)
            raise CartridgeError(where, f"{field} field shape {shape[:8]} of {dtype} needs {needs} bytes, "
                                        f"data_offsets give {span}")  # fmt: skip
        match = _FLAT_NAME.match(name)
        # Compared by length first: int() of a 5,000-digit index would itself be refused by Python.
        if match is not None and (len(match[3]) > len(str(len(tensors))) or int(match[3]) >= len(tensors)):
            raise CartridgeError(
                where,
                f"tensor name {name[:80]!r}: layer index {match[3][:20]} is not below the "
                f"{len(tensors)} tensors in the file",
            )
    if last_end > data_len:
        raise CartridgeError(
            where,
            f"truncated file: tensor data needs {last_end} bytes, file has {data_len} "
            f"(field data_offsets of {last_name[:80]!r})",
        )


def _unflatten(flat: Mapping[str, torch.Tensor], where: str) -> dict[str, list[torch.Tensor]]:
    grouped: dict[str, dict[int, torch.Tensor]] = {}
    unknown = []
    for name, tensor in flat.items():
        match = _FLAT_NAME.match(name)
        if match is None:
            unknown.append(name)
            continue
        grouped.setdefault(f"{match[1]}_{match[2]}", {})[int(match[3])] = tensor
    if not grouped:
        shown = ", ".join(sorted(unknown)[:5])
        raise CartridgeError(
            where, f"not a checkpoint: no tensors named trainable_keys.<layer> etc. (found: {shown or 'none'})"
        )
    out: dict[str, list[torch.Tensor]] = {}
    for name, by_layer in grouped.items():
        # Layers present are numbered 0..n-1 exactly when the largest is n-1; checked so, a huge index
        # costs nothing here, and only then is the (small) list of gaps built.
        if max(by_layer) >= len(by_layer):
            missing = list(itertools.islice((i for i in range(max(by_layer)) if i not in by_layer), 10))
            raise CartridgeError(where, f"missing layers {missing} in {name}.<layer>")
        out[name] = [by_layer[i] for i in range(len(by_layer))]
    return out


def _normalize(raw: object, where: str) -> Cartridge:
    if isinstance(raw, Mapping) and "cache" in raw and isinstance(raw["cache"], Mapping):
        raw = raw["cache"]
    if not isinstance(raw, Mapping):
        raise CartridgeError(
            where, f"not a checkpoint: top-level object is {type(raw).__name__}, expected a dict of KV lists"
        )
    missing = [k for k in TRAINABLE if k not in raw]
    frozen_pair = next((pair for pair in FROZEN_NAMES if pair[0] in raw or pair[1] in raw), None)
    if frozen_pair is not None:
        missing += [k for k in frozen_pair if k not in raw]
    if missing:
        present = ", ".join(sorted(map(str, raw.keys()))[:8]) or "none"
        raise CartridgeError(where, f"missing keys: {', '.join(missing)} (present: {present})")

    t_keys = _tensor_list(raw, "trainable_keys", where)
    t_values = _tensor_list(raw, "trainable_values", where)
    if frozen_pair is None:
        f_keys: list[torch.Tensor] = []
        f_values: list[torch.Tensor] = []
    else:
        f_keys = _tensor_list(raw, frozen_pair[0], where)
        f_values = _tensor_list(raw, frozen_pair[1], where)

    num_layers = len(t_keys)
    if num_layers == 0:
        raise CartridgeError(where, "no layers: trainable_keys is empty")
    counts = {"trainable_keys": len(t_keys), "trainable_values": len(t_values)}
    if frozen_pair is not None and (f_keys or f_values):
        counts |= {frozen_pair[0]: len(f_keys), frozen_pair[1]: len(f_values)}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{k}={n}" for k, n in counts.items())
        raise CartridgeError(where, f"ragged layers: the KV lists have different layer counts ({detail})")

    frozen_tokens = int(f_keys[0].shape[2]) if f_keys else 0
    keys, values = [], []
    for layer in range(num_layers):
        k = _join(f_keys[layer] if f_keys else None, t_keys[layer], where, layer, "K")
        v = _join(f_values[layer] if f_values else None, t_values[layer], where, layer, "V")
        if k.shape != v.shape:
            raise CartridgeError(
                where, f"ragged layers: layer {layer} K has shape {tuple(k.shape)} but V has {tuple(v.shape)}"
            )
        layer_frozen = int(f_keys[layer].shape[2]) if f_keys else 0
        if layer_frozen != frozen_tokens:
            raise CartridgeError(
                where,
                f"ragged layers: layer {layer} has {layer_frozen} frozen tokens but layer 0 has {frozen_tokens}",
            )
        if keys and k.shape != keys[0].shape:
            raise CartridgeError(
                where,
                f"ragged layers: layer {layer} has (T, H, D) = {tuple(k.shape)} but layer 0 has {tuple(keys[0].shape)}",
            )
        keys.append(k)
        values.append(v)
    return Cartridge(keys=tuple(keys), values=tuple(values), frozen_tokens=frozen_tokens, source=where)


def _tensor_list(raw: Mapping, name: str, where: str) -> list[torch.Tensor]:
    value = raw[name]
    if isinstance(value, torch.Tensor):
        # A stacked (L, 1, H, T, D) tensor is an equivalent spelling of the per-layer list.
        value = list(value.unbind(0)) if value.dim() == 5 else [value]
    if not isinstance(value, Sequence) or not all(isinstance(t, torch.Tensor) for t in value):
        raise CartridgeError(where, f"{name} must be a list of tensors, got {type(value).__name__}")
    for layer, tensor in enumerate(value):
        if tensor.dim() != 4 or tensor.shape[0] != 1:
            raise CartridgeError(where, f"{name}[{layer}] has shape {tuple(tensor.shape)}, expected (1, H_kv, T, D)")
        if not tensor.is_floating_point():
            raise CartridgeError(where, f"{name}[{layer}] has dtype {tensor.dtype}, expected a float dtype")
        if tensor.dtype not in _CARTRIDGE_TORCH_DTYPES:
            # FP8 is a float dtype, but one the suite derives from a BF16 cartridge, never reads.
            raise CartridgeError(
                where,
                f"{name}[{layer}] has dtype {tensor.dtype}; a cartridge is stored as float16, bfloat16, "
                "float32 or float64 (FP8 layouts are derived when serving)",
            )
    return list(value)


def _join(frozen: torch.Tensor | None, trainable: torch.Tensor, where: str, layer: int, kind: str) -> torch.Tensor:
    """(1, H, T, D) frozen + trainable -> (T_total, H, D)."""
    parts = [trainable] if frozen is None else [frozen, trainable]
    if frozen is not None and (frozen.shape[1] != trainable.shape[1] or frozen.shape[3] != trainable.shape[3]):
        raise CartridgeError(
            where,
            f"ragged layers: layer {layer} {kind} frozen prefix has (H, D) = "
            f"{(frozen.shape[1], frozen.shape[3])} but trainable part has {(trainable.shape[1], trainable.shape[3])}",
        )
    if frozen is not None and frozen.dtype != trainable.dtype:
        parts = [frozen.to(trainable.dtype), trainable]
    return torch.cat(parts, dim=2)[0].permute(1, 0, 2).contiguous()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
