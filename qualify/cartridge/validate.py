"""Check that a loaded cartridge fits a model and holds usable numbers."""

from __future__ import annotations

import torch

from qualify.cartridge.types import Cartridge, ModelKVShape
from qualify.errors import CartridgeError

_MAX_LISTED = 6  # enough to locate the damage without flooding a CI log


def check_fits_model(cartridge: Cartridge, expected: ModelKVShape) -> None:
    """Raise if the cartridge's layer count, KV heads or head dim differ from the model's."""
    actual = cartridge.shape
    for label, want, got in (
        ("layer count", expected.num_layers, actual.num_layers),
        ("KV head count", expected.num_kv_heads, actual.num_kv_heads),
        ("head_dim", expected.head_dim, actual.head_dim),
    ):
        if want != got:
            raise CartridgeError(cartridge.source, f"{label} mismatch: model expects {want}, cartridge has {got}")


def check_nonempty(cartridge: Cartridge) -> None:
    if cartridge.num_tokens == 0:
        raise CartridgeError(cartridge.source, "cartridge has zero tokens")
    if cartridge.frozen_tokens >= cartridge.num_tokens:
        raise CartridgeError(
            cartridge.source,
            f"cartridge has no trainable tokens ({cartridge.frozen_tokens} frozen of {cartridge.num_tokens})",
        )


def check_finite(cartridge: Cartridge) -> None:
    """Raise naming every layer (K or V) that holds NaN or Inf, with counts."""
    damaged = []
    for layer, (k, v) in enumerate(zip(cartridge.keys, cartridge.values, strict=True)):
        for kind, tensor in (("K", k), ("V", v)):
            nan = int(torch.isnan(tensor).sum())
            inf = int(torch.isinf(tensor).sum())
            if nan or inf:
                damaged.append(f"layer {layer} {kind}: {nan} NaN, {inf} Inf")
    if damaged:
        shown = "; ".join(damaged[:_MAX_LISTED])
        more = f"; and {len(damaged) - _MAX_LISTED} more" if len(damaged) > _MAX_LISTED else ""
        raise CartridgeError(cartridge.source, f"non-finite values in {len(damaged)} tensors: {shown}{more}")


def validate_cartridge(cartridge: Cartridge, expected: ModelKVShape) -> None:
    """All checks a cartridge must pass before any measurement uses it."""
    check_fits_model(cartridge, expected)
    check_nonempty(cartridge)
    check_finite(cartridge)
