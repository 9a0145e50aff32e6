"""A numerics gate's `envelope:` as matrix cells: the batches that reach every dispatch region at its edges.

For each region of the kernel's dispatch table inside the envelope (`cartridge_attn.dispatch`), decode cells
take the first batch of the region, the one after it and the last (so the batch where packing starts, one
past it, and the maximum), each at the shortest and the longest live suffix the region admits; prefill cells
take the first and last query-token counts of each region. Every batch is ragged: besides its longest request
it holds 1-token suffixes and suffixes on both sides of 8- and 16-token page edges, the rest drawn from a
generator seeded by the envelope's `seed` (recorded in the cell id), and `random_batches` more batches are drawn
whole. The cells are data in the compiled items, so `qualify list` shows them and the configuration each hits.
"""

from __future__ import annotations

import random
from typing import Any

from qualify.numerics.cell import NumericsEnvelope

# Suffix lengths on both sides of the page edges of either page size, and the 1-token suffix.
_EDGE_LENGTHS = (1, 7, 8, 9, 15, 16, 17, 31, 32, 33)
_PREFILL_HISTORY_MAX = 64  # live tokens before a prefill request's queries


def _ragged_live(n: int, longest: int, rng: random.Random) -> list[int]:
    lens = [longest, *[x for x in _EDGE_LENGTHS if x <= longest][: max(0, n - 1)]]
    lens += [rng.randint(1, longest) for _ in range(n - len(lens))]
    return lens[:n]


def _prefill_batch(tokens: int, rng: random.Random) -> dict[str, list[int]]:
    q_lens: list[int] = []
    while sum(q_lens) < tokens:
        q_lens.append(min(tokens - sum(q_lens), rng.choice([1, 7, 16, 17, 64, 200, 513])))
    if len(q_lens) > 1 and max(q_lens) == 1:
        # Every request with one query would be a decode launch, not the prefill this cell is for.
        q_lens = [2, *q_lens[2:]]
    rng.shuffle(q_lens)
    return {"q_lens": q_lens, "live_lens": [q + rng.randint(0, _PREFILL_HISTORY_MAX) for q in q_lens]}


def _group(fields: dict[str, Any]) -> tuple[int, int, str]:
    missing = [k for k in ("phase", "head_dim", "num_qo_heads", "num_kv_heads") if k not in fields]
    if missing:
        raise ValueError(f"an envelope gate sets {', '.join(missing)} itself (not by matrix or defaults)")
    heads, kv = int(fields["num_qo_heads"]), int(fields["num_kv_heads"])
    if kv <= 0 or heads % kv:
        raise ValueError(f"num_qo_heads {heads} is not a multiple of num_kv_heads {kv}")
    return heads // kv, int(fields["head_dim"]), str(fields["phase"])


def _cartridge_len(fields: dict[str, Any]) -> int:
    cart = fields.get("cartridge")
    if not isinstance(cart, dict) or not isinstance(cart.get("length"), int):
        raise ValueError("an envelope gate sets its cartridge (with a length) itself: decode splits depend on it")
    return int(cart["length"])


def envelope_axes(fields: dict[str, Any]) -> dict[str, list[Any]]:
    """The generated `batch` axis of a gate with `envelope:` (none without one). ValueError says what is wrong."""
    if fields.get("envelope") is None:
        return {}
    env = NumericsEnvelope.model_validate(fields["envelope"])
    group, head_dim, phase = _group(fields)
    from cartridge_attn.dispatch import decode_regions, prefill_regions

    rng = random.Random(env.seed)
    cells: dict[str, dict[str, Any]] = {}
    if phase == "decode":
        kv, cart = int(fields["num_kv_heads"]), _cartridge_len(fields)
        cascade = fields.get("decode_cascade")
        for region in decode_regions(group, head_dim, env.max_batch, env.max_live, kv, cart, cascade):
            assert region.batch is not None and region.max_live is not None
            b0, b1 = max(region.batch[0], env.min_batch), region.batch[1]
            if b0 > b1:
                continue
            for batch in sorted({b0, min(b0 + 1, b1), b1}):
                for live in sorted(set(region.max_live)):
                    cells[f"edge-b{batch}-l{live}"] = {"live_lens": _ragged_live(batch, live, rng)}
        for i in range(env.random_batches):
            batch, live = rng.randint(env.min_batch, env.max_batch), rng.randint(1, env.max_live)
            cells[f"rand{i}-s{env.seed}-b{batch}-l{live}"] = {"live_lens": _ragged_live(batch, live, rng)}
    else:
        kv = int(fields["num_kv_heads"])
        impl = str(fields.get("prefill_impl", "triton"))
        for region in prefill_regions(group, head_dim, kv, env.max_query_tokens, impl):
            for edge in region.edge_inputs():
                tokens = edge["query_tokens"]
                cells[f"edge-t{tokens}"] = _prefill_batch(tokens, rng)
        for i in range(env.random_batches):
            tokens = rng.randint(2, env.max_query_tokens)
            cells[f"rand{i}-s{env.seed}-t{tokens}"] = _prefill_batch(tokens, rng)
    return {"batch": [{"id": cell_id, **shape} for cell_id, shape in cells.items()]}
