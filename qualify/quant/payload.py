"""Raw KV payload sizes per layout: what a context or a cartridge costs in memory.

Raw payload only: FP8 scales (a few floats per layer) and allocator page rounding are left out, because they
do not change with the token count and would blur the per-token comparison.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from qualify.cartridge.types import ModelKVShape
from qualify.quant.layouts import ALL_LAYOUTS, Layout

KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True)
class PayloadRow:
    layout: Layout
    bytes_per_token: int  # all layers, K and V
    context_bytes: int  # a full KV cache of `context_tokens`
    cartridge_bytes: int  # the cartridge's `cartridge_tokens`
    capacity_ratio: float  # tokens that fit in the memory of one K16/V16 token


def bytes_per_token(shape: ModelKVShape, layout: Layout) -> int:
    per_side = shape.num_layers * shape.num_kv_heads * shape.head_dim
    return per_side * (layout.key_bits + layout.value_bits) // 8


def payload_table(
    shape: ModelKVShape,
    cartridge_tokens: int,
    context_tokens: int,
    layouts: Iterable[Layout] = ALL_LAYOUTS,
) -> tuple[PayloadRow, ...]:
    if cartridge_tokens < 0 or context_tokens < 0:
        raise ValueError("token counts must be non-negative")
    baseline = bytes_per_token(shape, Layout.K16_V16)
    rows = []
    for layout in layouts:
        per_token = bytes_per_token(shape, layout)
        rows.append(
            PayloadRow(
                layout=layout,
                bytes_per_token=per_token,
                context_bytes=per_token * context_tokens,
                cartridge_bytes=per_token * cartridge_tokens,
                capacity_ratio=baseline / per_token,
            )
        )
    return tuple(rows)


def render_payload_markdown(rows: Iterable[PayloadRow]) -> str:
    lines = [
        "| layout | KiB / token | context MiB | cartridge MiB | capacity vs K16/V16 |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.layout.value} | {r.bytes_per_token / KIB:.3f} | {r.context_bytes / MIB:.3f} "
            f"| {r.cartridge_bytes / MIB:.3f} | {r.capacity_ratio:.3f}x |"
        )
    return "\n".join(lines) + "\n"
