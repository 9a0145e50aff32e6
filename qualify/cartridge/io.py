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
    if head != _ZIP_MAGIC and head[:1] != bytes([_PICKLE_PROTO]):
        raise CartridgeError(
            str(path), "not a checkpoint: no PyTorch zip or pickle header (is it a text or other file?)"
        )
    if head == _ZIP_MAGIC:
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
            bad = archive.testzip()  # reads every member and checks its CRC
    except zipfile.BadZipFile:
        raise CartridgeError(
            str(path), "truncated file: the zip archive has no central directory (incomplete write or copy?)"
        ) from None
    except (EOFError, OSError) as exc:
        raise CartridgeError(str(path), f"truncated file: {_first_line(exc)}") from None
    if bad is not None:
        raise CartridgeError(str(path), f"corrupt checkpoint: CRC mismatch in archive member {bad!r}")


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
            if header_len > 100 * 1024 * 1024:
                raise CartridgeError(str(path), "not a checkpoint: no safetensors header")
            raise CartridgeError(str(path), f"truncated file: header needs {header_len} bytes, file has {size - 8}")
        try:
            header = json.loads(fh.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise CartridgeError(str(path), "not a checkpoint: safetensors header is not JSON") from None
    ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    if ends and max(ends) > size - 8 - header_len:
        raise CartridgeError(
            str(path), f"truncated file: tensor data needs {max(ends)} bytes, file has {size - 8 - header_len}"
        )
    try:
        flat = load_file(str(path))
    except SafetensorError as exc:
        raise CartridgeError(str(path), f"corrupt safetensors file: {_first_line(exc)}") from None
    return _unflatten(flat, str(path))


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
        missing = sorted(set(range(max(by_layer) + 1)) - set(by_layer))
        if missing:
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
