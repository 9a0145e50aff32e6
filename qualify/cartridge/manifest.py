"""The JSON manifest beside each cartridge file (`<file>.manifest.json`): identity, shape and provenance.

The manifest pins the cartridge file by sha256, so a report that cites a manifest cites exact bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from qualify.cartridge.io import check_file_present, load_cartridge
from qualify.cartridge.types import Cartridge, ModelKVShape
from qualify.cartridge.validate import validate_cartridge
from qualify.errors import CartridgeError
from qualify.hashing import sha256_file

MANIFEST_FORMAT = "cartridge-qualify/manifest/v1"
MANIFEST_SUFFIX = ".manifest.json"


class CartridgeManifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["cartridge-qualify/manifest/v1"] = MANIFEST_FORMAT
    id: str
    file: str  # basename of the cartridge file the manifest sits beside
    model_id: str
    num_layers: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    num_tokens: int = Field(ge=1)
    frozen_tokens: int = Field(ge=0)
    dtype: str  # torch dtype name without the "torch." prefix, e.g. "bfloat16"
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    # Free-form on purpose: script, args, seed, source-document sha256, wall time, machine...
    provenance: dict[str, Any] = Field(default_factory=dict)

    @property
    def kv_shape(self) -> ModelKVShape:
        return ModelKVShape(self.num_layers, self.num_kv_heads, self.head_dim)


def manifest_path(cartridge_path: Path | str) -> Path:
    path = Path(cartridge_path)
    return path.with_name(path.name + MANIFEST_SUFFIX)


def dtype_name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")


def build_manifest(
    cartridge: Cartridge,
    cartridge_path: Path | str,
    *,
    cartridge_id: str,
    model_id: str,
    provenance: dict[str, Any] | None = None,
) -> CartridgeManifest:
    """Describe the file at `cartridge_path` (already written) holding `cartridge`."""
    path = Path(cartridge_path)
    shape = cartridge.shape
    return CartridgeManifest(
        id=cartridge_id,
        file=path.name,
        model_id=model_id,
        num_layers=shape.num_layers,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        num_tokens=cartridge.num_tokens,
        frozen_tokens=cartridge.frozen_tokens,
        dtype=dtype_name(cartridge.dtype),
        sha256=sha256_file(path),
        provenance=provenance or {},
    )


def write_manifest(manifest: CartridgeManifest, cartridge_path: Path | str) -> Path:
    out = manifest_path(cartridge_path)
    out.write_text(json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=False) + "\n")
    return out


def read_manifest(cartridge_path: Path | str) -> CartridgeManifest:
    path = manifest_path(cartridge_path)
    if not path.is_file():
        raise CartridgeError(str(path), "manifest not found (expected beside the cartridge file)")
    try:
        return CartridgeManifest.model_validate_json(path.read_text())
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()[:5])
        raise CartridgeError(str(path), f"malformed manifest: {problems}") from None


def check_file_digest(cartridge_path: Path | str, manifest: CartridgeManifest) -> None:
    """Raise if the file's bytes are not the ones the manifest pins."""
    actual = sha256_file(cartridge_path)
    if actual != manifest.sha256:
        raise CartridgeError(
            str(cartridge_path), f"sha256 mismatch: manifest says {manifest.sha256}, file has {actual}"
        )


def check_against_manifest(cartridge: Cartridge, manifest: CartridgeManifest) -> None:
    """Raise if the loaded cartridge's shape, token counts or dtype differ from what the manifest records."""
    actual = {
        "num_layers": cartridge.num_layers,
        "num_kv_heads": cartridge.shape.num_kv_heads,
        "head_dim": cartridge.shape.head_dim,
        "num_tokens": cartridge.num_tokens,
        "frozen_tokens": cartridge.frozen_tokens,
        "dtype": dtype_name(cartridge.dtype),
    }
    recorded = manifest.model_dump()
    diffs = [f"{k}: manifest {recorded[k]}, file {v}" for k, v in actual.items() if recorded[k] != v]
    if diffs:
        raise CartridgeError(cartridge.source, f"shape mismatch with manifest: {'; '.join(diffs)}")


def load_verified_cartridge(
    cartridge_path: Path | str, expected: ModelKVShape | None = None
) -> tuple[Cartridge, CartridgeManifest]:
    """Load a cartridge only after its bytes match its manifest, then check shape, model fit and values."""
    check_file_present(Path(cartridge_path))
    manifest = read_manifest(cartridge_path)
    # Digest first: never parse bytes the manifest does not vouch for.
    check_file_digest(cartridge_path, manifest)
    cartridge = load_cartridge(cartridge_path)
    check_against_manifest(cartridge, manifest)
    validate_cartridge(cartridge, expected or manifest.kv_shape)
    return cartridge, manifest
