"""The `fa3-shared-pages-bf16` baseline: vLLM 0.26's FlashAttention-3 called as its FLASH_ATTN backend calls it,
over a block pool in which every request's block table starts with the same cartridge blocks (what vLLM's prefix
caching gives a cartridge prompt).

What vLLM does, and so what this does (read from vLLM 0.26.0's `v1/attention/backends/flash_attn.py`):

* blocks of 16 tokens (the backend takes multiples of 16 only), one pool tensor per layer of logical shape
  (blocks, 16, H_kv, 2 * D) with K and V packed in the last dimension and split into two strided views;
* `flash_attn_varlen_func(..., seqused_k=seq_lens, block_table=..., causal=True, fa_version=3)` with
  `get_scheduler_metadata` planned ahead of the step, and `num_splits` 32 (vLLM's
  `flash_attn_max_num_splits_for_cuda_graph`) when the step's tokens fit vLLM's largest captured graph (512 by
  default), 0 (FA3 chooses) otherwise.

The cartridge's whole blocks are shared; its last `cartridge_len % 16` positions sit in each request's first own
block, as vLLM's prefix cache leaves the partial last block of a prompt to the request. The prefill query is the
suffix alone (those tail positions count as already present), as for every other implementation of the kernel set.
vLLM also captures its decode graph with `max_seqlen_k = max_model_len`; here the scheduler sees the true length,
which can only favour the baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from qualify.perf.kernel_set import Built, CellSpec

FA3_BLOCK = 16  # vLLM's FLASH_ATTN backend supports block sizes that are multiples of 16
FULL_GRAPH_SPLITS = 32  # AttentionConfig.flash_attn_max_num_splits_for_cuda_graph's default in vLLM 0.26
MAX_CAPTURE_TOKENS = 512  # vLLM's default max_cudagraph_capture_size: min(2 * max_num_seqs, 512)
SELF_CHECK_MAX_REL_L2 = 2e-2  # BF16 outputs against an fp32 reference (the numerics gate's 1.5e-2, with room)


@dataclass(frozen=True)
class SharedBlocks:
    """One step's block tables: every request's row starts with the same `shared` cartridge blocks."""

    block_table: torch.Tensor  # (batch, blocks per request) int32
    seq_lens: torch.Tensor  # (batch,) int32: cartridge + live tokens
    cu_seqlens_q: torch.Tensor  # (batch + 1,) int32
    num_blocks: int  # blocks in the pool
    shared: int  # cartridge blocks every request shares
    max_seq_len: int
    q_len: int


def shared_block_table(
    batch: int, q_len: int, cartridge_len: int, live: int, *, device: torch.device, seed: int
) -> SharedBlocks:
    """Block tables for `batch` requests of `cartridge_len + live` tokens whose whole cartridge blocks are one shared
    copy (pool blocks ``[0, shared)``); each request's own blocks follow in a shuffled order, as a pool hands them
    out."""
    if not 1 <= q_len <= live:
        raise ValueError(f"q_len {q_len} must be in [1, live={live}]")
    shared = cartridge_len // FA3_BLOCK
    own = -(-(cartridge_len - shared * FA3_BLOCK + live) // FA3_BLOCK)
    gen = torch.Generator().manual_seed(seed)
    order = shared + torch.randperm(batch * own, generator=gen)
    table = torch.cat([torch.arange(shared).expand(batch, shared), order.view(batch, own)], dim=1)
    i32 = {"dtype": torch.int32, "device": device}
    return SharedBlocks(
        block_table=table.to(**i32),
        seq_lens=torch.full((batch,), cartridge_len + live, **i32),
        cu_seqlens_q=torch.arange(0, batch * q_len + 1, q_len, **i32),
        num_blocks=shared + batch * own,
        shared=shared,
        max_seq_len=cartridge_len + live,
        q_len=q_len,
    )


def num_splits(step_tokens: int) -> int:
    """`num_splits` vLLM 0.26 passes in its default mode (full and piecewise CUDA graphs) for a step of this many
    tokens: the CUDA-graph cap where a captured graph can serve the step, else 0 (FA3's own heuristic)."""
    return FULL_GRAPH_SPLITS if step_tokens <= MAX_CAPTURE_TOKENS else 0


def reference_rows(
    q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, blocks: SharedBlocks, request: int
) -> torch.Tensor:
    """fp32 attention of one request's query rows over its blocks (GQA, causal aligned to the sequence's end)."""
    seq = int(blocks.seq_lens[request])
    ids = blocks.block_table[request, : -(-seq // FA3_BLOCK)].long()
    h_kv, d = k_pool.shape[2], k_pool.shape[3]
    keys = k_pool[ids].reshape(-1, h_kv, d)[:seq].float()
    vals = v_pool[ids].reshape(-1, h_kv, d)[:seq].float()
    rows = q[request * blocks.q_len : (request + 1) * blocks.q_len].float()
    group = rows.shape[1] // h_kv
    keys, vals = keys.repeat_interleave(group, dim=1), vals.repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,shd->hts", rows, keys) / d**0.5
    # Both positions on the queries' device: on a GPU a CPU operand here would fail the comparison.
    last_seen = seq - blocks.q_len + torch.arange(blocks.q_len, device=q.device)
    visible = torch.arange(seq, device=q.device)[None, :] <= last_seen[:, None]
    scores = scores.masked_fill(~visible[None], float("-inf"))
    return torch.einsum("hts,shd->thd", scores.softmax(-1), vals)


def check_against_reference(
    run: Callable[[], object],
    out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    blocks: SharedBlocks,
) -> float:
    """Run once into a NaN-poisoned `out` and compare the first and last requests with `reference_rows`; the worst
    relative L2 error, or RuntimeError when it exceeds SELF_CHECK_MAX_REL_L2 (a baseline that computes something
    else would time fast and mean nothing)."""
    out.fill_(float("nan"))
    run()
    batch = blocks.seq_lens.numel()
    worst = 0.0
    for b in sorted({0, batch - 1}):
        want = reference_rows(q, k, v, blocks, b)
        got = out[b * blocks.q_len : (b + 1) * blocks.q_len].float()
        err = float((got - want).norm() / want.norm())
        if not err <= SELF_CHECK_MAX_REL_L2:  # a NaN fails here too
            raise RuntimeError(
                f"fa3-shared-pages-bf16: request {b} differs from the fp32 reference (relative L2 {err:.3g} > "
                f"{SELF_CHECK_MAX_REL_L2}); the baseline is not computing this cell's attention"
            )
        worst = max(worst, err)
    return worst


def build_with(spec: CellSpec, attention: Callable[..., Any], schedule: Callable[..., Any]) -> Built:
    """The baseline for one cell over the given FA3 entry points (vLLM's `flash_attn_varlen_func` and
    `get_scheduler_metadata`; tests pass stand-ins)."""
    from qualify.perf.kernel_set import Built, layer_calls

    s = spec.shape
    blocks = shared_block_table(spec.batch, spec.q_len, s.cartridge_len, spec.live, device=spec.device, seed=spec.seed)
    splits = num_splits(spec.batch * spec.q_len)
    metadata = schedule(
        batch_size=spec.batch,
        max_seqlen_q=spec.q_len,
        max_seqlen_k=blocks.max_seq_len,
        num_heads_q=s.num_qo_heads,
        num_heads_kv=s.num_kv_heads,
        headdim=s.head_dim,
        cache_seqlens=blocks.seq_lens,
        qkv_dtype=torch.bfloat16,
        cu_seqlens_q=blocks.cu_seqlens_q,
        page_size=FA3_BLOCK,
        causal=True,
        window_size=(-1, -1),
        num_splits=splits,
    )
    sets = []
    for _ in range(spec.n_sets):
        pool = torch.randn(blocks.num_blocks, FA3_BLOCK, s.num_kv_heads, 2 * s.head_dim, device=spec.device)
        pool = pool.to(torch.bfloat16)
        q = torch.randn(spec.batch * spec.q_len, s.num_qo_heads, s.head_dim, device=spec.device).to(torch.bfloat16)
        sets.append((q, pool[..., : s.head_dim], pool[..., s.head_dim :], torch.empty_like(q)))

    def one(i: int) -> Callable[[], object]:
        q, k, v, out = sets[i]
        return lambda: attention(
            q=q, k=k, v=v, out=out, cu_seqlens_q=blocks.cu_seqlens_q, max_seqlen_q=spec.q_len,
            seqused_k=blocks.seq_lens, max_seqlen_k=blocks.max_seq_len, softmax_scale=s.head_dim**-0.5,
            causal=True, alibi_slopes=None, window_size=[-1, -1], block_table=blocks.block_table, softcap=0,
            scheduler_metadata=metadata, fa_version=3, num_splits=splits,
        )  # fmt: skip

    q0, k0, v0, out0 = sets[0]
    self_check = check_against_reference(one(0), out0, q0, k0, v0, blocks)
    facts = {
        "baseline": "vllm.vllm_flash_attn.flash_attn_varlen_func, fa_version 3",
        "block_size": FA3_BLOCK,
        "shared_blocks": blocks.shared,
        "num_splits": splits,
        "self_check_rel_l2": self_check,
    }
    return Built(layer_calls(spec, one), keep=[sets, blocks, metadata], identity=lambda: facts)


def build_fa3_shared_pages_bf16(spec: CellSpec) -> Built:
    """`KERNEL_SET`'s builder of `fa3-shared-pages-bf16` (needs vLLM 0.26 with its FA3 extension, SM90)."""
    from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

    return build_with(spec, flash_attn_varlen_func, get_scheduler_metadata)
