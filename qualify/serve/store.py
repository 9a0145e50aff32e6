"""The cartridge on the GPU, per layer, in the dtypes a serving mode reads it in."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from qualify.cartridge.io import load_cartridge
from qualify.serve.config import CartridgeFacts, EngineFacts, ServingConfig, check_cartridge

FP8 = torch.float8_e4m3fn
_FP8_MAX = 448.0


@dataclass(frozen=True)
class LayerCartridge:
    k: torch.Tensor  # (T, H_kv, D) bfloat16
    v: torch.Tensor  # (T, H_kv, D) bfloat16 or float8_e4m3fn
    v_scale: torch.Tensor | None  # (H_kv,) float32 when v is FP8


def fp8_per_head(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """V (T, H, D) -> (FP8 E4M3 values, per-head float32 scale) with amax / 448 per head."""
    amax = v.float().abs().amax(dim=(0, 2)).clamp_min(1e-12)
    scale = (amax / _FP8_MAX).to(torch.float32)
    q = (v.float() / scale[None, :, None]).clamp(-_FP8_MAX, _FP8_MAX).to(FP8)
    return q, scale


def load_layers(
    cfg: ServingConfig, engine: EngineFacts, device: torch.device, *, value_dtype: str, heads: range | None = None
) -> list[LayerCartridge]:
    """Read `cfg.path`, check it against the engine, and place every layer on `device`.

    `value_dtype` is ``"bfloat16"`` or ``"fp8_e4m3"`` (per-KV-head scale). `heads`: the KV heads one
    tensor-parallel rank holds (`RankHeads.kv_heads`); every head when None. Sliced before FP8 quantization,
    which is per head, so a rank's values and scales are exactly those heads' of the whole cartridge.
    """
    cart = load_cartridge(cfg.path)
    check_cartridge(
        cfg, engine, CartridgeFacts(cart.num_layers, cart.num_tokens, cart.shape.num_kv_heads, cart.shape.head_dim)
    )
    layers = []
    cut = slice(None) if heads is None else slice(heads.start, heads.stop)
    for k, v in zip(cart.keys, cart.values, strict=True):
        k = k[:, cut].to(device=device, dtype=torch.bfloat16).contiguous()
        v = v[:, cut].to(device=device, dtype=torch.bfloat16)
        if value_dtype == "fp8_e4m3":
            vq, scale = fp8_per_head(v)
            layers.append(LayerCartridge(k, vq.contiguous(), scale))
        else:
            layers.append(LayerCartridge(k, v.contiguous(), None))
    return layers
