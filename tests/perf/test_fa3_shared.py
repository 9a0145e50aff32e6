"""The `fa3-shared-pages-bf16` baseline's set-up on the CPU: block tables as vLLM's prefix cache leaves them, FA3
called with vLLM's arguments, and a self-check that refuses a baseline computing anything but the cell's attention.
FA3 itself is stood in for by an independent dense attention (`scaled_dot_product_attention` over the gathered
blocks); on an SM90 host with vLLM the perf gate runs the real one."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from qualify.perf.fa3_shared import (
    FA3_BLOCK,
    FULL_GRAPH_SPLITS,
    MAX_CAPTURE_TOKENS,
    build_with,
    num_splits,
    shared_block_table,
)
from qualify.perf.kernel_set import cell_spec
from qualify.perf.metrics import metric
from qualify.perf.spec import ShapeSet


def _shape(rng: random.Random) -> ShapeSet:
    kv = rng.choice([1, 2])
    return ShapeSet(
        id="t", num_layers=rng.randint(1, 3), num_qo_heads=kv * rng.choice([1, 2, 4]), num_kv_heads=kv,
        head_dim=rng.choice([16, 32]), page_size=8, cartridge_len=rng.randrange(16, 72, 8), batches=[1, 3],
        suffixes=[rng.randint(2, 20)], generated_tokens=rng.choice([2, 8]),
    )  # fmt: skip


def _spec(rng: random.Random, phase: str) -> Any:
    shape = _shape(rng)
    name = "decode_tokens_per_s" if phase == "decode" else "ttft_proxy_ms"
    return cell_spec(shape, metric(name), rng.choice(shape.batches), shape.suffixes[0], l2_cold=True, redundant=1,
                     device=torch.device("cpu"), seed=rng.randrange(2**31))  # fmt: skip


class DenseFa3:
    """Stands in for `flash_attn_varlen_func`: each request's blocks gathered, SDPA with a bottom-right causal mask;
    `wrong` breaks it the way a baseline could go wrong unnoticed."""

    def __init__(self, wrong: str | None = None, shared: int = 0) -> None:
        self.wrong, self.shared = wrong, shared
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kw: Any) -> None:
        self.calls.append(kw)
        if self.wrong == "no-write":
            return
        q, k, v, out = kw["q"], kw["k"], kw["v"], kw["out"]
        cu, seqs, table = kw["cu_seqlens_q"], kw["seqused_k"], kw["block_table"]
        for b in range(seqs.numel()):
            seq, rows = int(seqs[b]), slice(int(cu[b]), int(cu[b + 1]))
            ids = table[b].long()
            if self.wrong == "cartridge-blocks-skipped":  # attends over the request's own blocks alone
                ids, seq = ids[self.shared :], seq - self.shared * FA3_BLOCK
            keys = k[ids].flatten(0, 1)[:seq]
            vals = v[ids].flatten(0, 1)[:seq]
            qb = q[rows].float().transpose(0, 1)  # (H, t, D)
            t = qb.shape[1]
            group = qb.shape[0] // keys.shape[1]
            kb = keys.float().repeat_interleave(group, 1).transpose(0, 1)
            vb = vals.float().repeat_interleave(group, 1).transpose(0, 1)
            mask = torch.ones(t, kb.shape[1], dtype=torch.bool).tril(kb.shape[1] - t)
            if self.wrong == "no-causal-mask":
                mask = torch.ones_like(mask)
            o = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=kw["softmax_scale"])
            out[rows] = o.transpose(0, 1).to(out.dtype)


def _schedule(calls: list[dict[str, Any]]) -> Any:
    def schedule(**kw: Any) -> str:
        calls.append(kw)
        return "metadata"

    return schedule


def test_every_request_starts_with_the_same_cartridge_blocks_and_owns_the_rest(test_seed: int) -> None:
    rng = random.Random(test_seed)
    batch, cart, live = rng.randint(1, 9), rng.randint(1, 700), rng.randint(1, 300)
    blocks = shared_block_table(batch, 1, cart, live, device=torch.device("cpu"), seed=rng.randrange(2**31))
    shared = cart // FA3_BLOCK
    assert blocks.shared == shared
    assert torch.equal(blocks.block_table[:, :shared], torch.arange(shared).expand(batch, shared).int())
    own = blocks.block_table[:, shared:]
    assert own.numel() == own.unique().numel() and int(own.min()) >= shared  # no block of two requests
    assert blocks.num_blocks == shared + own.numel() and int(own.max()) == blocks.num_blocks - 1
    # A request's own blocks hold the cartridge's partial tail and its live tokens, and no more.
    assert own.shape[1] == -(-(cart % FA3_BLOCK + live) // FA3_BLOCK)
    assert blocks.seq_lens.tolist() == [cart + live] * batch and blocks.max_seq_len == cart + live
    assert blocks.block_table.dtype == blocks.seq_lens.dtype == blocks.cu_seqlens_q.dtype == torch.int32


def test_num_splits_follow_vllm_s_default_graph_mode() -> None:
    assert num_splits(1) == num_splits(MAX_CAPTURE_TOKENS) == FULL_GRAPH_SPLITS
    assert num_splits(MAX_CAPTURE_TOKENS + 1) == 0


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_the_baseline_calls_fa3_as_vllm_does_and_checks_its_output(phase: str, test_seed: int) -> None:
    rng = random.Random(test_seed)
    spec = _spec(rng, phase)
    fa3, scheduled = DenseFa3(), []
    built = build_with(spec, fa3, _schedule(scheduled))
    assert len(built.calls) == spec.shape.num_layers and len(fa3.calls) == 1  # the self-check's call
    for call in built.calls:
        call()
    kw = fa3.calls[-1]
    splits = num_splits(spec.batch * spec.q_len)
    assert kw["fa_version"] == 3 and kw["causal"] is True and kw["num_splits"] == splits
    assert kw["scheduler_metadata"] == "metadata" and kw["max_seqlen_q"] == spec.q_len
    assert kw["k"].shape[1] == FA3_BLOCK and kw["k"].data_ptr() + spec.shape.head_dim * 2 == kw["v"].data_ptr()
    (plan,) = scheduled
    assert plan["page_size"] == FA3_BLOCK and plan["num_splits"] == splits and plan["causal"] is True
    assert plan["max_seqlen_k"] == spec.shape.cartridge_len + spec.live == int(kw["seqused_k"][0])
    facts = built.identity()
    assert facts["num_splits"] == splits and facts["self_check_rel_l2"] < 2e-2


@pytest.mark.parametrize("wrong", ["no-write", "cartridge-blocks-skipped", "no-causal-mask"])
def test_a_baseline_that_computes_something_else_is_refused(wrong: str, test_seed: int) -> None:
    rng = random.Random(test_seed)
    # Prefill queries have at least 2 tokens, so a missing causal mask changes them.
    spec = _spec(rng, "prefill" if wrong == "no-causal-mask" else rng.choice(["decode", "prefill"]))
    with pytest.raises(RuntimeError, match="differs from the fp32 reference"):
        build_with(spec, DenseFa3(wrong, shared=spec.shape.cartridge_len // FA3_BLOCK), _schedule([]))
