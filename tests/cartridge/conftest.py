"""Random cartridges of random shapes, written to tmp_path in either on-disk layout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from qualify.cartridge.types import Cartridge


@pytest.fixture
def gen(test_seed: int) -> torch.Generator:
    # A fresh seed per test session (printed with a failure; tests/conftest.py), so the tests do not pass only
    # for one lucky input.
    return torch.Generator().manual_seed(test_seed)


@pytest.fixture
def random_cartridge(gen: torch.Generator) -> Callable[..., Cartridge]:
    def make(
        layers: int | None = None,
        heads: int | None = None,
        tokens: int | None = None,
        head_dim: int | None = None,
        frozen: int | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> Cartridge:
        def pick(value: int | None, lo: int, hi: int) -> int:
            return value if value is not None else int(torch.randint(lo, hi + 1, (), generator=gen))

        n_layers, n_heads = pick(layers, 1, 4), pick(heads, 1, 4)
        n_tokens, dim = pick(tokens, 2, 24), pick(head_dim, 2, 16)
        n_frozen = pick(frozen, 0, n_tokens - 1)
        keys = tuple(torch.randn(n_tokens, n_heads, dim, generator=gen).to(dtype) for _ in range(n_layers))
        values = tuple(torch.randn(n_tokens, n_heads, dim, generator=gen).to(dtype) for _ in range(n_layers))
        return Cartridge(keys=keys, values=values, frozen_tokens=n_frozen, source="mem://random")

    return make


def reference_dict(c: Cartridge, frozen_name: str = "fixed") -> dict[str, list[torch.Tensor]]:
    """The Cartridges reference layout, built by hand: (1, H, T, D) per layer, frozen part separate."""
    f = c.frozen_tokens

    def lay(t: torch.Tensor) -> torch.Tensor:
        return t.permute(1, 0, 2).unsqueeze(0).contiguous()

    return {
        "trainable_keys": [lay(k[f:]) for k in c.keys],
        "trainable_values": [lay(v[f:]) for v in c.values],
        f"{frozen_name}_keys": [lay(k[:f]) for k in c.keys],
        f"{frozen_name}_values": [lay(v[:f]) for v in c.values],
    }


@pytest.fixture
def write_reference() -> Callable[[dict, Path], Path]:
    def write(obj: dict, path: Path) -> Path:
        if path.suffix == ".safetensors":
            from safetensors.torch import save_file

            flat = {f"{name}.{i}": t for name, ts in obj.items() for i, t in enumerate(ts)}
            save_file(flat, str(path))
        else:
            torch.save(obj, path)
        return path

    return write


@pytest.fixture
def as_reference() -> Callable[..., dict]:
    return reference_dict
