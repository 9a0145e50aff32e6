"""The in-memory form of a cartridge, independent of the file layout it came from."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ModelKVShape:
    """What a model expects of a KV prefix: one (T, H_kv, D) K and V per layer."""

    num_layers: int
    num_kv_heads: int
    head_dim: int

    @classmethod
    def from_hf_config(cls, config: object) -> ModelKVShape:
        """Read the KV shape of a Hugging Face decoder config (Llama, Qwen2/3, Mistral style)."""
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(int(config.num_hidden_layers), int(kv_heads), int(head_dim))


@dataclass(frozen=True)
class Cartridge:
    """Per-layer K and V of a trained prefix, normalized to shape (T, H_kv, D).

    `frozen_tokens` positions come first (position 0 is the attention sink); they were not trained.
    `source` is the file the cartridge was read from, for error messages and provenance.
    """

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    frozen_tokens: int
    source: str

    @property
    def num_layers(self) -> int:
        return len(self.keys)

    @property
    def num_tokens(self) -> int:
        return int(self.keys[0].shape[0])

    @property
    def shape(self) -> ModelKVShape:
        _, h, d = self.keys[0].shape
        return ModelKVShape(self.num_layers, int(h), int(d))

    @property
    def dtype(self) -> torch.dtype:
        return self.keys[0].dtype

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Cartridge:
        return Cartridge(
            keys=tuple(k.to(device=device, dtype=dtype) for k in self.keys),
            values=tuple(v.to(device=device, dtype=dtype) for v in self.values),
            frozen_tokens=self.frozen_tokens,
            source=self.source,
        )
