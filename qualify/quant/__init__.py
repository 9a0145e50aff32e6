"""FP8 fake quantization and the KV layouts it is applied to."""

from qualify.quant.fp8 import E4M3_MAX, FakeQuantized, Scaling, amax_scale, fake_quant_e4m3
from qualify.quant.layouts import ALL_LAYOUTS, Layout, QuantStats, UnknownLayoutError, apply_layout
from qualify.quant.payload import PayloadRow, bytes_per_token, payload_table, render_payload_markdown

__all__ = [
    "ALL_LAYOUTS",
    "E4M3_MAX",
    "FakeQuantized",
    "Layout",
    "PayloadRow",
    "QuantStats",
    "Scaling",
    "UnknownLayoutError",
    "amax_scale",
    "apply_layout",
    "bytes_per_token",
    "fake_quant_e4m3",
    "payload_table",
    "render_payload_markdown",
]
