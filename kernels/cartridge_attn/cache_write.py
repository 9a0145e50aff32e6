"""Writing a step's new live K and V into the paged cache, with V in BF16 or FP8 E4M3.

A serving engine's own cache writer stores K and V in one dtype. The shared-cartridge path can keep live V
in FP8 (per-KV-head scale) while live K stays BF16, so it writes both in one launch here: one program per
(token, KV head), slots below zero (padding) skipped. A serving engine writes the same layer's pages every step, so
``check_live_pages`` checks a layer's pages and the step tensors' layout once and `LivePages.write` launches with
only the row count checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from ._kernel import FP8_DTYPE
from .errors import UnsupportedLayoutError
from .launch import DirectLaunches, pointer_specialization

__all__ = ["LivePages", "check_live_pages", "write_live_kv"]


@triton.jit
def _write_live_kv_kernel(
    key_ptr,
    value_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_ptr,
    v_scale_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_kc_page,
    stride_kc_slot,
    stride_kc_head,
    stride_vc_page,
    stride_vc_slot,
    stride_vc_head,
    PAGE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    V_FP8: tl.constexpr,
):
    t = tl.program_id(0)
    h = tl.program_id(1)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    d = tl.arange(0, HEAD_DIM)
    ok = (d * 0 + slot) >= 0
    page = tl.maximum(slot, 0) // PAGE
    off = tl.maximum(slot, 0) % PAGE
    k = tl.load(key_ptr + t * stride_kt + h * stride_kh + d, mask=ok, other=0.0)
    v = tl.load(value_ptr + t * stride_vt + h * stride_vh + d, mask=ok, other=0.0)
    tl.store(k_cache_ptr + page * stride_kc_page + off * stride_kc_slot + h * stride_kc_head + d, k, mask=ok)
    if V_FP8:
        scale = tl.load(v_scale_ptr + h)
        # Saturate at E4M3's largest finite value (a literal: Triton reads no non-constexpr globals).
        v32 = tl.minimum(tl.maximum(v.to(tl.float32) / scale, -448.0), 448.0)
        v = v32.to(v_cache_ptr.dtype.element_ty)
    tl.store(v_cache_ptr + page * stride_vc_page + off * stride_vc_slot + h * stride_vc_head + d, v, mask=ok)


@dataclass(frozen=True)
class LivePages:
    """One layer's K and V pages and V scale, checked with the layout of the step's K and V (``check_live_pages``)."""

    k_pages: torch.Tensor
    v_pages: torch.Tensor
    v_scale: torch.Tensor | None
    kv_dtype: torch.dtype
    row_shape: tuple[int, int]  # (H_kv, D) of a token's K and V
    v_fp8: bool
    launches: DirectLaunches | None = field(default=None, compare=False, repr=False)  # see check_live_pages

    def write(self, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Store token ``t``'s K and V at ``slot_mapping[t]`` (see `write_live_kv`); ``key`` and ``value`` in the
        layout the pages were checked with, at least ``slot_mapping``'s length of rows."""
        n = int(slot_mapping.shape[0])
        if n == 0:
            return
        for name, t in (("key", key), ("value", value)):
            if t.shape[0] < n:
                raise UnsupportedLayoutError(name, f">= {n} rows (the slot mapping's length)", tuple(t.shape))
        k_pages, v_pages = self.k_pages, self.v_pages
        scale = self.v_scale if self.v_fp8 else slot_mapping  # any pointer; unread unless V_FP8
        args = (
            key, value, k_pages, v_pages, slot_mapping, scale,
            key.stride(0), key.stride(1), value.stride(0), value.stride(1),
            k_pages.stride(0), k_pages.stride(1), k_pages.stride(2),
            v_pages.stride(0), v_pages.stride(1), v_pages.stride(2),
        )  # fmt: skip
        constexprs = {"PAGE": k_pages.shape[1], "HEAD_DIM": self.row_shape[1], "V_FP8": self.v_fp8}
        grid = (n, self.row_shape[0])
        if self.launches is None:
            _write_live_kv_kernel[grid](*args, **constexprs)
            return
        # The pages and the scale are this object's own; the step's K, V and slots can move and change strides.
        key_ = (*pointer_specialization((key, value, slot_mapping)), *args[6:10])
        self.launches.launch(grid, key_, args, constexprs, {})


def check_live_pages(
    key: torch.Tensor,
    value: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    slot_mapping: torch.Tensor,
    v_scale: torch.Tensor | None = None,
    *,
    direct_launch: bool = False,
) -> LivePages:
    """Check a layer's pages against a step's K, V and slot mapping once; arguments as for `write_live_kv`.

    With ``direct_launch``, `LivePages.write` launches a specialization it launched before without Triton's
    per-call binding (`cartridge_attn.launch.DirectLaunches`).
    """
    if k_pages.dim() != 4 or v_pages.shape != k_pages.shape:
        raise UnsupportedLayoutError(
            "cache pages", "K and V both (num_pages, page_size, H_kv, D)", (tuple(k_pages.shape), tuple(v_pages.shape))
        )
    _, _, h_kv, d = k_pages.shape
    for name, t in (("key", key), ("value", value)):
        if t.dim() != 3 or tuple(t.shape[1:]) != (h_kv, d) or t.stride(-1) != 1:
            raise UnsupportedLayoutError(name, f"(tokens, {h_kv}, {d}) with D contiguous", tuple(t.shape))
    if key.dtype != k_pages.dtype or value.dtype != key.dtype:
        raise UnsupportedLayoutError("key/value dtype", f"the K cache dtype {k_pages.dtype}", (key.dtype, value.dtype))
    v_fp8 = v_pages.dtype == FP8_DTYPE
    if not v_fp8 and v_pages.dtype != key.dtype:
        raise UnsupportedLayoutError("V cache dtype", f"{key.dtype} or float8_e4m3fn", v_pages.dtype)
    if v_fp8 and (v_scale is None or v_scale.shape != (h_kv,) or v_scale.dtype != torch.float32):
        got = None if v_scale is None else (tuple(v_scale.shape), v_scale.dtype)
        raise UnsupportedLayoutError("v_scale", f"float32 ({h_kv},) for an FP8 V cache", got)
    if k_pages.stride(-1) != 1 or v_pages.stride(-1) != 1:
        raise UnsupportedLayoutError(
            "cache innermost stride", "1 (head_dim contiguous)", (k_pages.stride(-1), v_pages.stride(-1))
        )
    if slot_mapping.dtype not in (torch.int32, torch.int64):
        raise UnsupportedLayoutError("slot_mapping dtype", "int32 or int64", slot_mapping.dtype)
    launches = DirectLaunches(_write_live_kv_kernel) if direct_launch else None
    return LivePages(k_pages, v_pages, v_scale if v_fp8 else None, key.dtype, (int(h_kv), int(d)), v_fp8, launches)


def write_live_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    slot_mapping: torch.Tensor,
    v_scale: torch.Tensor | None = None,
) -> None:
    """Store token ``t``'s K and V (``(T, H_kv, D)``, T >= ``slot_mapping``'s length) at ``slot_mapping[t]``.

    ``k_pages`` and ``v_pages`` are ``(num_pages, page_size, H_kv, D)`` with any page, slot and head strides
    (D contiguous); ``v_pages`` is K's dtype or FP8 E4M3, in which case ``v_scale`` ``(H_kv,)`` float32
    divides V before rounding (saturating at +-448). Slot ``s`` is page ``s // page_size``, row
    ``s % page_size``; a negative slot is padding and is skipped.
    """
    if int(slot_mapping.shape[0]) == 0:
        return
    check_live_pages(key, value, k_pages, v_pages, slot_mapping, v_scale).write(key, value, slot_mapping)
