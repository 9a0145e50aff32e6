"""The cell fields a numerics envelope's cells are derived from (`envelope_cells`), named once without importing it.

The kind's spec lists them so that the compiler refuses a gate that sets one through `defaults` or a matrix axis,
where the cells would run with it and the envelope would be expanded without it.
"""

from __future__ import annotations

ENVELOPE_READS: tuple[str, ...] = (
    "phase", "head_dim", "num_qo_heads", "num_kv_heads", "cartridge", "decode_cascade", "prefill_impl",
)  # fmt: skip
