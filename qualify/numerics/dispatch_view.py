"""Which kernel configuration a numerics cell dispatches, in one line for `qualify list`.

The cell does not pick a configuration: `plan` chooses it from the shape by the kernel's own heuristics
(`cartridge_attn.dispatch`), so listing what each cell reaches is how a gate author sees which of the dispatch
table's regions the gate qualifies.
"""

from __future__ import annotations

from qualify.numerics.cell import KernelNumericsParams


def describe_cell(params: KernelNumericsParams) -> str:
    if params.check != "kernel":
        return f"{params.check} check"
    from cartridge_attn import heuristics as K

    group, rem = divmod(params.num_qo_heads, params.num_kv_heads)
    if rem or group not in K.SUPPORTED_GROUPS or params.head_dim not in K.SUPPORTED_HEAD_DIMS:
        return "outside the kernel's support: must be rejected"
    if params.cartridge.length % params.page_size or params.page_size not in K.SUPPORTED_PAGE_SIZES:
        return "outside the kernel's contract: must be rejected"
    lives = params.batch.live_lens
    if params.phase == "decode":
        c = K.decode_config(group, params.head_dim, len(lives), max(lives))
        where = f"batch {len(lives)}, max live {max(lives)}"
    else:
        tokens = sum(params.batch.q_lens or [])
        c = K.prefill_config(group, params.head_dim, rows=tokens * group, num_kv_heads=params.num_kv_heads)
        where = f"{tokens} query tokens x group {group}, {params.num_kv_heads} KV heads"
    return (
        f"{params.phase} m{c.block_m}n{c.block_n}r{c.reqs_per_program}w{c.num_warps}s{c.num_stages} "
        f"g{group} d{params.head_dim} p{params.page_size} ({where})"
    )
