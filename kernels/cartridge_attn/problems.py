"""Random problems (cartridge + paged live suffix) for tests, benchmarks and the numerics gate.

Pages are handed out in a shuffled order with spare pages in between, so that a kernel which ignores the
page table, or reads a neighbouring page, gives a wrong answer instead of a lucky right one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["AttentionProblem", "poison_cascade_states", "random_problem"]


@dataclass
class AttentionProblem:
    """All inputs of one fused-attention call.

    Attributes
    ----------
    q : torch.Tensor
        ``(total_q, H_q, D)``.
    cartridge_k, cartridge_v : torch.Tensor
        ``(T_c, H_kv, D)``.
    live_k, live_v : torch.Tensor
        ``(num_pages, page_size, H_kv, D)``; views of ``combined`` when it is set, or of one K-then-V row per token
        and head (``random_problem(interleaved=True)``).
    combined : torch.Tensor or None
        FlashInfer's ``(num_pages, 2, page_size, H_kv, D)`` cache, when requested and K/V share a dtype.
    qo_indptr, kv_indptr, kv_indices, kv_last_page_len : torch.Tensor
        int32 query offsets and live page table.
    cartridge_v_scale, live_v_scale : torch.Tensor or None
        ``(H_kv,)`` float32 scales of FP8 values.
    page_size : int
    """

    q: torch.Tensor
    cartridge_k: torch.Tensor
    cartridge_v: torch.Tensor
    live_k: torch.Tensor
    live_v: torch.Tensor
    combined: torch.Tensor | None
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_last_page_len: torch.Tensor
    cartridge_v_scale: torch.Tensor | None
    live_v_scale: torch.Tensor | None
    page_size: int

    @property
    def paged_kv(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self.combined if self.combined is not None else (self.live_k, self.live_v)

    def plan_kwargs(self) -> dict:
        """Keyword arguments of :meth:`CartridgeAttention.plan` that describe this problem."""
        return {
            "num_qo_heads": self.q.shape[1],
            "num_kv_heads": self.cartridge_k.shape[1],
            "head_dim": self.q.shape[2],
            "page_size": self.page_size,
            "cartridge_len": self.cartridge_k.shape[0],
            "q_dtype": self.q.dtype,
            "cartridge_v_dtype": self.cartridge_v.dtype,
            "live_v_dtype": self.live_v.dtype,
        }

    def run_kwargs(self) -> dict:
        return {"cartridge_v_scale": self.cartridge_v_scale, "live_v_scale": self.live_v_scale}

    def page_table(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.qo_indptr, self.kv_indptr, self.kv_indices, self.kv_last_page_len

    def poison_free_slots(self) -> None:
        """NaN in every (page, slot) of the pool that holds no live token of any request, K and V alike.

        A serving cache holds anything there (stale tokens, or never-written memory whose bytes may be NaN); a
        kernel that reads past a request's end, or a wrong page, then gives NaN instead of a plausible number, and
        one that loads whole pages (TMA) must keep those slots out of P x V itself, since P = 0 times NaN is NaN.
        """
        from .paging import live_lengths

        n_pages, ps = self.live_k.shape[:2]
        used = torch.zeros(n_pages, ps, dtype=torch.bool)
        lens = live_lengths(self.kv_indptr.cpu(), self.kv_last_page_len.cpu(), ps).tolist()
        indptr, indices = self.kv_indptr.cpu().tolist(), self.kv_indices.cpu().tolist()
        for b, n in enumerate(lens):
            for j in range(n):
                used[indices[indptr[b] + j // ps], j % ps] = True
        free = (~used).nonzero(as_tuple=True)
        for t in (self.live_k, self.live_v):
            if t.dtype == torch.float8_e4m3fn:
                t.view(torch.uint8)[free] = _FP8_NAN_BYTE
            else:
                t[free] = float("nan")


_FP8_NAN_BYTE = 0x7F  # E4M3FN: S.1111.111 is NaN


def poison_cascade_states(attn: Any) -> None:
    """NaN in the states a planned decode cascade hands from its first launch to its second (nothing without a
    cascade, or before a plan): a live walk that merges them before the cascade has written them gives NaN."""
    from .errors import NotPlannedError

    try:
        plan = attn.plan_info
    except NotPlannedError:
        return  # nothing planned, nothing to poison: the run says what is wrong
    if plan.config.cart_rows:
        for name in ("cart_o", "cart_ml"):
            plan.tensors[name].fill_(float("nan"))


def _fp8_values(x: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """Stored FP8 values of ``x`` (..., H_kv, D) under a per-head scale: value * scale ~ x."""
    if scale is not None:
        x = x / scale[:, None]
    return x.clamp(-440.0, 440.0).to(torch.float8_e4m3fn)


def random_problem(
    q_lens: Sequence[int],
    live_lens: Sequence[int],
    *,
    num_qo_heads: int = 8,
    num_kv_heads: int = 2,
    head_dim: int = 64,
    page_size: int = 8,
    cartridge_len: int = 16,
    dtype: torch.dtype = torch.bfloat16,
    cartridge_v_dtype: torch.dtype = torch.float8_e4m3fn,
    live_v_dtype: torch.dtype | None = None,
    fp8_scale: bool = True,
    combined: bool = False,
    interleaved: bool = False,
    spare_pages: int = 3,
    device: torch.device | str = "cpu",
    seed: int | None = None,
) -> AttentionProblem:
    """Draw a fresh random problem.

    Parameters
    ----------
    q_lens, live_lens : sequence of int
        Queries and live tokens per request.
    num_qo_heads, num_kv_heads, head_dim, page_size, cartridge_len : int
        Shape. ``cartridge_len`` is not checked here, so that invalid lengths can be built for tests.
    dtype : torch.dtype
        Query and key dtype.
    cartridge_v_dtype, live_v_dtype : torch.dtype
        V dtypes (``live_v_dtype`` defaults to ``dtype``).
    fp8_scale : bool
        Give FP8 values a random per-head scale (else no scale, i.e. 1).
    combined : bool
        Store live K/V in FlashInfer's combined layout (needs equal K and V dtypes).
    interleaved : bool
        Store each token's K and V of one head in one row of the query dtype, K's D values then V's (D values, or
        D FP8 bytes in the room of D / 2 elements): the serving plugin's vLLM cache (`qualify.serve.backend`), whose
        heads sit further apart than D. ``live_k`` / ``live_v`` are views of it.
    spare_pages : int
        Unused pages mixed into the pool (filled with random data).
    device : torch.device or str
    seed : int or None
        None draws a fresh seed, so that every call sees new data.

    Returns
    -------
    AttentionProblem
    """
    device = torch.device(device)
    seed = int(torch.randint(0, 2**62, (1,)).item()) if seed is None else seed
    gen = torch.Generator()  # page order, on the host
    gen.manual_seed(seed)
    dgen = torch.Generator(device=device)  # tensor data, drawn where it will live
    dgen.manual_seed(seed + 1)
    live_v_dtype = dtype if live_v_dtype is None else live_v_dtype
    h_kv, d, ps = num_kv_heads, head_dim, page_size
    n_pages_req = [(n + ps - 1) // ps for n in live_lens]
    total_pages = sum(n_pages_req) + spare_pages
    perm = torch.randperm(total_pages, generator=gen)
    indices, indptr, pos = [], [0], 0
    for n in n_pages_req:
        indices.append(perm[pos : pos + n])
        pos += n
        indptr.append(pos)
    kv_indices = torch.cat(indices) if indices else torch.zeros(0, dtype=torch.int64)
    last = [n - (p - 1) * ps if p > 0 else 0 for n, p in zip(live_lens, n_pages_req, strict=True)]
    qo = [0]
    for n in q_lens:
        qo.append(qo[-1] + n)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=dgen, dtype=torch.float32, device=device)

    def scale_for(vdt: torch.dtype) -> torch.Tensor | None:
        if vdt != torch.float8_e4m3fn or not fp8_scale:
            return None
        return 0.25 + 1.5 * torch.rand(h_kv, generator=dgen, device=device)

    cv_scale, lv_scale = scale_for(cartridge_v_dtype), scale_for(live_v_dtype)
    cart_k = randn(cartridge_len, h_kv, d).to(dtype)
    if cartridge_v_dtype == torch.float8_e4m3fn:
        cart_v = _fp8_values(randn(cartridge_len, h_kv, d), cv_scale)
    else:
        cart_v = randn(cartridge_len, h_kv, d).to(cartridge_v_dtype)
    if combined and interleaved:
        raise ValueError("a problem's live pages are combined or interleaved, not both")
    if combined:
        if live_v_dtype != dtype:
            raise ValueError("the combined layout stores K and V in one dtype")
        comb = randn(total_pages, 2, ps, h_kv, d).to(dtype)
        live_k, live_v = comb[:, 0], comb[:, 1]
    elif interleaved:
        comb = None
        v_room = d * live_v_dtype.itemsize // dtype.itemsize
        rows = torch.empty(total_pages, ps, h_kv, d + v_room, dtype=dtype, device=device)
        live_k, live_v = rows[..., :d], rows[..., d:].view(live_v_dtype)
        live_k.copy_(randn(total_pages, ps, h_kv, d))
        if live_v_dtype == torch.float8_e4m3fn:
            live_v.copy_(_fp8_values(randn(total_pages, ps, h_kv, d), lv_scale))
        else:
            live_v.copy_(randn(total_pages, ps, h_kv, d))
    else:
        comb = None
        live_k = randn(total_pages, ps, h_kv, d).to(dtype)
        if live_v_dtype == torch.float8_e4m3fn:
            live_v = _fp8_values(randn(total_pages, ps, h_kv, d), lv_scale)
        else:
            live_v = randn(total_pages, ps, h_kv, d).to(live_v_dtype)
    i32 = {"dtype": torch.int32, "device": device}
    return AttentionProblem(
        q=randn(qo[-1], num_qo_heads, d).to(dtype),
        cartridge_k=cart_k,
        cartridge_v=cart_v,
        live_k=live_k,
        live_v=live_v,
        combined=comb,
        qo_indptr=torch.tensor(qo, **i32),
        kv_indptr=torch.tensor(indptr, **i32),
        kv_indices=kv_indices.to(**i32),
        kv_last_page_len=torch.tensor(last, **i32),
        cartridge_v_scale=cv_scale,
        live_v_scale=lv_scale,
        page_size=ps,
    )
