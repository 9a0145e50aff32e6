"""Input design: the seeded problem of a `kernel_numerics` cell, with real weight where kernels go wrong."""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from qualify.numerics.cell import KernelNumericsParams

DTYPES = {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}


def cell_seed(run_seed: int, suite: str, item_name: str, repeat: int) -> int:
    """The seed of one repeat of one item: fresh per item and repeat, reproducible from the run's seed."""
    digest = hashlib.sha256(f"{run_seed}:{suite}:{item_name}:{repeat}".encode()).digest()
    return int.from_bytes(digest[:7], "little")


def query_lens(p: KernelNumericsParams) -> list[int]:
    """Queries per request: one each in decode, the batch's `q_lens` (or one each) in prefill."""
    live = p.batch.live_lens
    return [1] * len(live) if p.phase == "decode" else list(p.batch.q_lens or [1] * len(live))


def contract_violation(p: KernelNumericsParams) -> str | None:
    """Why the kernel's documented contract excludes this cell, or None when it must serve it."""
    import cartridge_attn as ca

    if p.cartridge.length <= 0 or p.cartridge.length % p.page_size:
        return f"cartridge length {p.cartridge.length} is not a positive multiple of page size {p.page_size}"
    if p.page_size not in ca.SUPPORTED_PAGE_SIZES:
        return f"page size {p.page_size} not in {ca.SUPPORTED_PAGE_SIZES}"
    if p.head_dim not in ca.SUPPORTED_HEAD_DIMS:
        return f"head_dim {p.head_dim} not in {ca.SUPPORTED_HEAD_DIMS}"
    if (
        p.num_kv_heads <= 0
        or p.num_qo_heads % p.num_kv_heads
        or p.num_qo_heads // p.num_kv_heads not in (ca.SUPPORTED_GROUPS)
    ):
        return f"GQA group {p.num_qo_heads}/{p.num_kv_heads} not supported"
    if any(n == 0 for n in p.batch.live_lens):
        return "a request has zero live tokens"
    return None


def build_problem(p: KernelNumericsParams, device: torch.device, seed: int) -> Any:
    """The cell's `AttentionProblem` drawn from `seed` on `device`, boundary-emphasized when the cell asks."""
    from cartridge_attn import random_problem

    live = p.batch.live_lens
    pr = random_problem(
        query_lens(p),
        live,
        num_qo_heads=p.num_qo_heads,
        num_kv_heads=p.num_kv_heads,
        head_dim=p.head_dim,
        page_size=p.page_size,
        cartridge_len=p.cartridge.length,
        dtype=torch.bfloat16,
        cartridge_v_dtype=DTYPES[p.cartridge_v],
        live_v_dtype=DTYPES[p.live_v],
        fp8_scale=p.fp8_scale,
        combined=p.kv_layout == "combined",
        interleaved=p.kv_layout == "interleaved",
        device=device,
        seed=seed,
    )
    if p.emphasize_boundary and p.cartridge.length and all(n > 0 for n in live):
        emphasize_boundary(pr, p, seed)
    if p.negative_logits:
        shift_logits(pr, seed, p.negative_logits)
    if p.poison_free_slots:
        pr.poison_free_slots()
    return pr


def _query_direction(pr: Any, seed: int) -> torch.Tensor:
    """A unit direction u_h per KV head (seeded), added as sqrt(D) * u_h to every query of that head; a key with a
    component c * u_h then gains about c in logit (nats) for all of them. Returns u, ``(H_kv, D)`` fp32."""
    gen = torch.Generator(device=pr.q.device)
    gen.manual_seed(seed)
    h_q, d = pr.q.shape[1], pr.q.shape[2]
    u = torch.randn(pr.cartridge_k.shape[1], d, generator=gen, device=pr.q.device)
    u = u / u.norm(dim=-1, keepdim=True)
    pr.q.add_((u * math.sqrt(d)).repeat_interleave(h_q // u.shape[0], dim=0).to(pr.q.dtype))
    return u


def boost_keys(pr: Any, seed: int, targets: list[tuple[str, int]], logit: float) -> None:
    """Raise the logit of chosen key positions by about `logit` for every query of their KV head.

    Queries of KV head h get a shared unit direction u_h (scaled by sqrt(D), which adds only O(1) noise
    to other logits) and each target key is replaced by logit * u_h, so those keys carry a known share of
    the attention however random the rest is. Targets are ("cartridge", position) or ("live", position
    within every request).
    """
    u = _query_direction(pr, seed + 7)
    key = (logit * u).to(pr.cartridge_k.dtype)
    ps = pr.page_size
    for source, pos in targets:
        if source == "cartridge":
            pr.cartridge_k[pos] = key
            continue
        indptr = pr.kv_indptr.tolist()
        for b in range(len(indptr) - 1):
            page = int(pr.kv_indices[indptr[b] + pos // ps])
            pr.live_k[page, pos % ps] = key


def shift_logits(pr: Any, seed: int, shift: float) -> None:
    """Add `shift` nats to the logit of every real key (cartridge and live), for every query of its KV head.

    The queries of KV head h gain sqrt(D) * u_h along a unit direction u_h and every key gains shift * u_h, so
    each score moves by `shift` plus a per-row constant and O(1) noise: the softmax over real keys barely changes,
    while a key outside the problem (a zero pad, logit 0) would take almost all the weight.
    """
    u = _query_direction(pr, seed + 11)
    pr.cartridge_k.add_((shift * u).to(pr.cartridge_k.dtype))
    from cartridge_attn.paging import live_lengths

    ps = pr.page_size
    lens = live_lengths(pr.kv_indptr.cpu(), pr.kv_last_page_len.cpu(), ps).tolist()
    indptr, indices = pr.kv_indptr.tolist(), pr.kv_indices.tolist()
    slots = [(indices[indptr[b] + j // ps], j % ps) for b, n in enumerate(lens) for j in range(n)]
    pages = torch.tensor([pg for pg, _ in slots], device=pr.live_k.device)
    within = torch.tensor([sl for _, sl in slots], device=pr.live_k.device)
    pr.live_k[pages, within] += (shift * u).to(pr.live_k.dtype)


def emphasize_boundary(pr: Any, p: KernelNumericsParams, seed: int) -> None:
    """Make the inputs able to expose boundary mistakes, not only average ones.

    With random keys a dropped or misplaced single position moves the output by ~1/n and hides inside
    the tolerance. So the positions a kernel is most likely to get wrong carry real weight: the last
    cartridge position and the first live position (the boundary between the two sources), and, for a
    `sink` cartridge, position 0 as a trained attention sink does.
    """
    n_keys = p.cartridge.length + sum(p.batch.live_lens) / len(p.batch.live_lens)
    base = math.log(max(n_keys, 2.0))
    targets = [("cartridge", p.cartridge.length - 1), ("live", 0)]
    boost_keys(pr, seed, targets, base)
    if p.cartridge.sink:
        boost_keys(pr, seed + 1, [("cartridge", 0)], base + 1.0)


def describe_cell(p: KernelNumericsParams) -> dict[str, Any]:
    """The measurements every check mode records: the cell's shape, layout and tolerances."""
    return {
        "check": p.check,
        "phase": p.phase,
        "live_v": p.live_v,
        "cartridge_v": p.cartridge_v,
        "page_size": p.page_size,
        "cartridge_len": p.cartridge.length,
        "sink": p.cartridge.sink,
        "head_dim": p.head_dim,
        "batch": p.batch.id,
        "q_lens": [1] * len(p.batch.live_lens) if p.phase == "decode" else p.batch.q_lens,
        "live_lens": p.batch.live_lens,
        "kv_layout": p.kv_layout,
        "tolerance": {"rtol": p.rtol, "atol": p.atol, "rel_l2": p.max_rel_l2},
    }
