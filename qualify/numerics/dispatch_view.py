"""Which kernel configuration a numerics cell dispatches, in one line for `qualify list`.

The cell does not pick a configuration: `plan` chooses it from the shape by the kernel's own heuristics
(`cartridge_attn.dispatch`), so listing what each cell reaches is how a gate author sees which of the dispatch
table's regions the gate qualifies.
"""

from __future__ import annotations

from qualify.numerics.cell import KernelNumericsParams
from qualify.numerics.inputs import contract_violation


def describe_cell(params: KernelNumericsParams) -> str:
    if params.check != "kernel":
        return f"{params.check} check"
    violation = contract_violation(params)
    if violation:
        return f"outside the kernel's contract ({violation}): must be rejected"
    from cartridge_attn import heuristics as K

    group = params.num_qo_heads // params.num_kv_heads
    lives = params.batch.live_lens
    if params.phase == "decode":
        c = K.decode_config(
            group, params.head_dim, len(lives), max(lives), num_kv_heads=params.num_kv_heads,
            cartridge_len=params.cartridge.length,
            cart_rows=K.cascade_rows(params.decode_cascade),
        )  # fmt: skip
        where = f"batch {len(lives)}, max live {max(lives)}"
    else:
        tokens = sum(params.batch.q_lens or [])
        bits = {"fp8_e4m3": 8, "bf16": 16}
        c = K.prefill_config(
            group, params.head_dim, rows=tokens * group, num_kv_heads=params.num_kv_heads, impl=params.prefill_impl,
            live_v_bits=bits[params.live_v],
        )  # fmt: skip
        where = f"{tokens} query tokens x group {group}, {params.num_kv_heads} KV heads"
    return f"{params.phase} {c.tag} g{group} d{params.head_dim} p{params.page_size} ({where})"
