"""Raw KV payload sizes per layout."""

from __future__ import annotations

import pytest

from qualify.cartridge.types import ModelKVShape
from qualify.quant.layouts import ALL_LAYOUTS
from qualify.quant.payload import KIB, MIB, payload_table, render_payload_markdown

QWEN3_8B = ModelKVShape(num_layers=36, num_kv_heads=8, head_dim=128)


def test_qwen3_8b_numbers() -> None:
    rows = payload_table(QWEN3_8B, cartridge_tokens=632, context_tokens=632)
    assert [r.layout for r in rows] == list(ALL_LAYOUTS)
    assert [r.bytes_per_token / KIB for r in rows] == [144, 108, 108, 72]
    assert [r.cartridge_bytes / MIB for r in rows] == [88.875, 66.65625, 66.65625, 44.4375]
    assert [r.context_bytes for r in rows] == [r.cartridge_bytes for r in rows]
    assert [round(r.capacity_ratio, 3) for r in rows] == [1.0, 1.333, 1.333, 2.0]


def test_context_and_cartridge_scale_separately() -> None:
    rows = payload_table(QWEN3_8B, cartridge_tokens=128, context_tokens=32768)
    assert rows[0].context_bytes == 144 * KIB * 32768
    assert rows[3].cartridge_bytes == 72 * KIB * 128
    with pytest.raises(ValueError):
        payload_table(QWEN3_8B, cartridge_tokens=-1, context_tokens=0)


def test_markdown_rendering() -> None:
    md = render_payload_markdown(payload_table(QWEN3_8B, cartridge_tokens=632, context_tokens=632))
    lines = md.strip().splitlines()
    assert len(lines) == 2 + 4
    assert lines[2] == "| K16/V16 | 144.000 | 88.875 | 88.875 | 1.000x |"
    assert lines[3] == "| K16/V8 | 108.000 | 66.656 | 66.656 | 1.333x |"
    assert lines[4].startswith("| K8/V16 | 108.000 | 66.656 |")
    assert lines[5] == "| K8/V8 | 72.000 | 44.438 | 44.438 | 2.000x |"
