"""Page tables and KV layouts around the fused kernel.

Conventions (FlashInfer's, NHD):

* a request ``b`` owns the live pages ``kv_indices[kv_indptr[b]:kv_indptr[b + 1]]`` in order;
* its live length is ``(num_pages - 1) * page_size + kv_last_page_len[b]`` with
  ``1 <= kv_last_page_len[b] <= page_size``;
* live token ``j`` of request ``b`` is at logical position ``cartridge_len + j`` and lives in page
  ``kv_indices[kv_indptr[b] + j // page_size]``, slot ``j % page_size``.

The page table covers the live suffix only. Because the cartridge length is a multiple of the page
size, logical page ``k >= cartridge_len // page_size`` of a request is its live page
``k - cartridge_len // page_size``; no page straddles the cartridge/live boundary.

The "injection" layout is what a server does without the fused kernel: the cartridge is copied into
the first pages of every request. The "cascade" layout keeps one shared copy of the cartridge in the
page pool and gives each request its own live pages, for FlashInfer's two-level cascade wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "CascadeLayout",
    "InjectionLayout",
    "block_table_to_indptr",
    "build_cascade_layout",
    "build_injection_layout",
    "dequantize_v",
    "gather_live",
    "live_lengths",
    "split_combined_kv",
]


def live_lengths(kv_indptr: torch.Tensor, kv_last_page_len: torch.Tensor, page_size: int) -> torch.Tensor:
    """Live token count per request.

    Parameters
    ----------
    kv_indptr : torch.Tensor
        ``(B + 1,)`` integer, offsets into the page index list.
    kv_last_page_len : torch.Tensor
        ``(B,)`` integer, tokens in each request's last page.
    page_size : int
        Tokens per page.

    Returns
    -------
    torch.Tensor
        ``(B,)`` int64; 0 for a request that owns no page.
    """
    pages = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64)
    last = kv_last_page_len.to(torch.int64)
    return torch.where(pages > 0, (pages - 1) * page_size + last, torch.zeros_like(pages))


def block_table_to_indptr(
    block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Convert a vLLM-style block table of the live suffix to FlashInfer's indptr form.

    Parameters
    ----------
    block_table : torch.Tensor
        ``(B, max_pages)`` integer; row ``b`` lists request ``b``'s live pages, padding after them.
    seq_lens : torch.Tensor
        ``(B,)`` integer live lengths (each at least 1).
    page_size : int
        Tokens per page.

    Returns
    -------
    tuple of torch.Tensor
        ``kv_indptr`` ``(B + 1,)``, ``kv_indices`` ``(nnz,)`` and ``kv_last_page_len`` ``(B,)``, all int32
        on ``block_table``'s device.
    """
    lens = seq_lens.to(torch.int64)
    npages = (lens + page_size - 1) // page_size
    indptr = torch.zeros(lens.numel() + 1, dtype=torch.int64, device=block_table.device)
    indptr[1:] = torch.cumsum(npages.to(block_table.device), 0)
    cols = torch.arange(block_table.shape[1], device=block_table.device)
    keep = cols[None, :] < npages.to(block_table.device)[:, None]
    indices = block_table[keep]
    last = lens - (npages - 1) * page_size
    return indptr.to(torch.int32), indices.to(torch.int32), last.to(torch.int32).to(block_table.device)


def split_combined_kv(kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the K and V pages of FlashInfer's combined NHD cache, without copying.

    Parameters
    ----------
    kv : torch.Tensor
        ``(num_pages, 2, page_size, H_kv, D)``.

    Returns
    -------
    tuple of torch.Tensor
        ``(k, v)``, each ``(num_pages, page_size, H_kv, D)`` with the page stride of ``kv``.
    """
    if kv.dim() != 5 or kv.shape[1] != 2:
        raise ValueError(f"combined KV cache: expected shape (num_pages, 2, page_size, H_kv, D), got {tuple(kv.shape)}")
    return kv[:, 0], kv[:, 1]


def dequantize_v(v: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """Values times their per-KV-head scale, in ``dtype``.

    Parameters
    ----------
    v : torch.Tensor
        ``(..., H_kv, D)`` in any float dtype (FP8 E4M3 included).
    scale : torch.Tensor or None
        ``(H_kv,)`` float, or None for 1.
    dtype : torch.dtype
        Result dtype.
    """
    out = v.to(torch.float32)
    if scale is not None:
        out = out * scale.to(device=v.device, dtype=torch.float32)[:, None]
    return out.to(dtype)


def gather_live(
    pages: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor, b: int, length: int
) -> torch.Tensor:
    """The first ``length`` live tokens of request ``b``, in order.

    Parameters
    ----------
    pages : torch.Tensor
        ``(num_pages, page_size, H_kv, D)``.
    kv_indptr, kv_indices : torch.Tensor
        The live page table.
    b : int
        Request index.
    length : int
        Live tokens to return.

    Returns
    -------
    torch.Tensor
        ``(length, H_kv, D)`` in ``pages``' dtype.
    """
    lo, hi = int(kv_indptr[b]), int(kv_indptr[b + 1])
    idx = kv_indices[lo:hi].to(device=pages.device, dtype=torch.int64)
    return pages[idx].reshape(-1, *pages.shape[2:])[:length]


@dataclass(frozen=True)
class InjectionLayout:
    """The cartridge copied into the first pages of every request (ordinary injection).

    Attributes
    ----------
    kv_cache : torch.Tensor
        ``(num_pages, 2, page_size, H_kv, D)``; FlashInfer's combined NHD layout.
    kv_indptr, kv_indices, kv_last_page_len : torch.Tensor
        int32 page table over the whole logical sequence (cartridge + live).
    """

    kv_cache: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_last_page_len: torch.Tensor


@dataclass(frozen=True)
class CascadeLayout:
    """One shared copy of the cartridge plus per-request live pages, in one page pool.

    Attributes
    ----------
    kv_cache : torch.Tensor
        ``(num_pages, 2, page_size, H_kv, D)``.
    shared_indptr, shared_indices, shared_last_page_len : torch.Tensor
        int32 table of one "request" holding the cartridge pages.
    unique_indptr, unique_indices, unique_last_page_len : torch.Tensor
        int32 per-request live page table.
    """

    kv_cache: torch.Tensor
    shared_indptr: torch.Tensor
    shared_indices: torch.Tensor
    shared_last_page_len: torch.Tensor
    unique_indptr: torch.Tensor
    unique_indices: torch.Tensor
    unique_last_page_len: torch.Tensor


def _cartridge_pages(
    cartridge_k: torch.Tensor, cartridge_v: torch.Tensor, scale: torch.Tensor | None, page_size: int, dtype: torch.dtype
) -> torch.Tensor:
    t_c, h, d = cartridge_k.shape
    if t_c % page_size:
        raise ValueError(f"cartridge length {t_c} is not a multiple of page_size {page_size}")
    k = cartridge_k.to(dtype).reshape(t_c // page_size, page_size, h, d)
    v = dequantize_v(cartridge_v, scale, dtype).reshape(t_c // page_size, page_size, h, d)
    return torch.stack([k, v], dim=1)


def _live_pages_in_order(
    live_k: torch.Tensor,
    live_v: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    live_v_scale: torch.Tensor | None,
    dtype: torch.dtype,
) -> torch.Tensor:
    idx = kv_indices[: int(kv_indptr[-1])].to(device=live_k.device, dtype=torch.int64)
    k = live_k[idx].to(dtype)
    v = dequantize_v(live_v[idx], live_v_scale, dtype)
    return torch.stack([k, v], dim=1)


def build_injection_layout(
    cartridge_k: torch.Tensor,
    cartridge_v: torch.Tensor,
    live_k: torch.Tensor,
    live_v: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_len: torch.Tensor,
    *,
    cartridge_v_scale: torch.Tensor | None = None,
    live_v_scale: torch.Tensor | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> InjectionLayout:
    """Copy the cartridge into every request's first pages, followed by its live pages.

    Parameters
    ----------
    cartridge_k, cartridge_v : torch.Tensor
        ``(T_c, H_kv, D)``; V may be FP8 (dequantized with ``cartridge_v_scale``).
    live_k, live_v : torch.Tensor
        ``(num_pages, page_size, H_kv, D)`` live pages (views of a combined cache are fine).
    kv_indptr, kv_indices, kv_last_page_len : torch.Tensor
        The live page table.
    cartridge_v_scale, live_v_scale : torch.Tensor or None
        ``(H_kv,)`` per-head V scales, None for 1.
    dtype : torch.dtype
        Element type of the new cache (BF16 for the baseline).

    Returns
    -------
    InjectionLayout
        Pages are laid out request by request: ``T_c / page_size`` cartridge copies, then the live pages.
    """
    page_size = live_k.shape[1]
    cart = _cartridge_pages(cartridge_k, cartridge_v, cartridge_v_scale, page_size, dtype)
    live = _live_pages_in_order(live_k, live_v, kv_indptr, kv_indices, live_v_scale, dtype)
    n_cart = cart.shape[0]
    batch = kv_indptr.numel() - 1
    npages = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64).cpu()
    new_counts = npages + n_cart
    indptr = torch.zeros(batch + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(new_counts, 0)
    total = int(indptr[-1])
    cache = torch.empty((total, 2, *cart.shape[2:]), dtype=dtype, device=live_k.device)
    # Cartridge copies occupy [indptr[b], indptr[b] + n_cart); live pages follow, in request order.
    starts = indptr[:-1]
    cart_dst = (starts[:, None] + torch.arange(n_cart)[None, :]).reshape(-1).to(live_k.device)
    cache[cart_dst] = cart.repeat(batch, 1, 1, 1, 1)
    live_dst = torch.cat(
        [torch.arange(int(s) + n_cart, int(s) + n_cart + int(n)) for s, n in zip(starts, npages, strict=True)]
    )
    cache[live_dst.to(live_k.device)] = live
    # Slots past a request's last live token are not part of the problem (a cache may hold anything there, NaN
    # included): the copy holds zeros, so that the baseline never depends on how a kernel treats them.
    lens = kv_last_page_len.to(torch.int64).cpu()
    rows, slots = (torch.arange(page_size)[None, :] >= lens[:, None]).nonzero(as_tuple=True)
    last_pages = starts + n_cart + npages - 1
    cache[last_pages[rows].to(live_k.device), :, slots.to(live_k.device)] = 0
    dev = kv_indptr.device
    return InjectionLayout(
        kv_cache=cache,
        kv_indptr=indptr.to(device=dev, dtype=torch.int32),
        kv_indices=torch.arange(total, dtype=torch.int32, device=dev),
        kv_last_page_len=kv_last_page_len.to(device=dev, dtype=torch.int32).clone(),
    )


def build_cascade_layout(
    cartridge_k: torch.Tensor,
    cartridge_v: torch.Tensor,
    live_k: torch.Tensor,
    live_v: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_last_page_len: torch.Tensor,
    *,
    cartridge_v_scale: torch.Tensor | None = None,
    live_v_scale: torch.Tensor | None = None,
    dtype: torch.dtype = torch.bfloat16,
) -> CascadeLayout:
    """One shared cartridge copy (pages ``[0, T_c / page_size)``) followed by all live pages.

    Parameters are those of :func:`build_injection_layout`.

    Returns
    -------
    CascadeLayout
        Level 0 is the shared cartridge, level 1 the per-request live suffix.
    """
    page_size = live_k.shape[1]
    cart = _cartridge_pages(cartridge_k, cartridge_v, cartridge_v_scale, page_size, dtype)
    live = _live_pages_in_order(live_k, live_v, kv_indptr, kv_indices, live_v_scale, dtype)
    n_cart = cart.shape[0]
    cache = torch.cat([cart, live], dim=0)
    dev = kv_indptr.device
    i32 = {"device": dev, "dtype": torch.int32}
    return CascadeLayout(
        kv_cache=cache,
        shared_indptr=torch.tensor([0, n_cart], **i32),
        shared_indices=torch.arange(n_cart, **i32),
        shared_last_page_len=torch.tensor([page_size], **i32),
        unique_indptr=(kv_indptr - kv_indptr[0]).to(**i32),
        unique_indices=torch.arange(n_cart, n_cart + live.shape[0], **i32),
        unique_last_page_len=kv_last_page_len.to(**i32).clone(),
    )


def shared_page_table(layout: CascadeLayout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The page table of `layout`'s pool in which every request's list starts with the one shared copy of the
    cartridge pages, then its own live pages: what vLLM's prefix cache gives (every request's block table points
    at the same cartridge blocks), for a single-level paged kernel. No cartridge is copied.

    Returns
    -------
    tuple of torch.Tensor
        ``kv_indptr`` ``(B + 1,)``, ``kv_indices`` and ``kv_last_page_len`` ``(B,)``, int32 on the layout's device.
    """
    shared = layout.shared_indices
    n_cart = shared.numel()
    indptr = layout.unique_indptr.to(torch.int64)
    batch = indptr.numel() - 1
    pieces = []
    for b in range(batch):
        pieces += [shared, layout.unique_indices[int(indptr[b]) : int(indptr[b + 1])]]
    own = indptr[1:] - indptr[:-1]
    kv_indptr = torch.zeros(batch + 1, dtype=torch.int32, device=shared.device)
    kv_indptr[1:] = torch.cumsum(own + n_cart, 0).to(torch.int32)
    return kv_indptr, torch.cat(pieces).to(torch.int32), layout.unique_last_page_len.clone()
