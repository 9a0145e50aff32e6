"""Bytes an implementation moves per decode step and per TTFT proxy: unique bytes, each read once.

Counted: queries and outputs, the live K/V the attention reads, the cartridge (once per call when shared,
once per request when injected) and, for injection TTFT, the cartridge copy (its source read once, one copy
written per request). Page tables are left out (under 0.1 % here). The ratio of these bytes to the measured
time, against the device-to-device copy bandwidth measured in the same process, is `pct_peak_bw`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """How an implementation holds K and V; element sizes in bytes. Each kernel implementation names its own
    in the implementation table (`qualify.perf.implementations`)."""

    cartridge_k: int
    cartridge_v: int
    live_k: int
    live_v: int
    shared_cartridge: bool  # one cartridge copy serves every request
    copies_cartridge_for_prefill: bool  # TTFT includes writing the cartridge into each new request's pages


@dataclass(frozen=True)
class AttentionShape:
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    cartridge_len: int
    q_bytes: int = 2  # BF16 queries and outputs


def attention_bytes(layout: Layout, shape: AttentionShape, batch: int, q_len: int, live: int) -> int:
    """One attention layer call over `batch` requests with `q_len` queries and `live` live tokens each."""
    token = shape.num_kv_heads * shape.head_dim
    q_o = 2 * batch * q_len * shape.num_qo_heads * shape.head_dim * shape.q_bytes
    live_kv = batch * live * token * (layout.live_k + layout.live_v)
    copies = 1 if layout.shared_cartridge else batch
    cartridge = copies * shape.cartridge_len * token * (layout.cartridge_k + layout.cartridge_v)
    return q_o + live_kv + cartridge


def cartridge_copy_bytes(layout: Layout, shape: AttentionShape, batch: int) -> int:
    """Writing the cartridge into `batch` new requests' pages (zero for a shared cartridge)."""
    if not layout.copies_cartridge_for_prefill:
        return 0
    one = shape.cartridge_len * shape.num_kv_heads * shape.head_dim * (layout.cartridge_k + layout.cartridge_v)
    return one + batch * one


def decode_step_bytes(layout: Layout, shape: AttentionShape, layers: int, batch: int, live: int) -> int:
    return layers * attention_bytes(layout, shape, batch, 1, live)


def ttft_bytes(layout: Layout, shape: AttentionShape, layers: int, batch: int, suffix: int) -> int:
    per_layer = attention_bytes(layout, shape, batch, suffix, suffix) + cartridge_copy_bytes(layout, shape, batch)
    return layers * per_layer


def pct_of_peak(bytes_moved: int, seconds: float, peak_bytes_per_s: float | None) -> float | None:
    if not peak_bytes_per_s or seconds <= 0:
        return None
    return 100.0 * bytes_moved / seconds / peak_bytes_per_s
