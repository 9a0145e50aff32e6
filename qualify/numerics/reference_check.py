"""`check: reference` (host-only): the fp32 reference agrees with an independent float64 attention.

The float64 attention runs over the ordinary injection layout (the cartridge copied into every request's
pages), so paging, indexing and masking of the reference are checked without a GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from qualify.errors import QualifyError
from qualify.numerics.fused import kernel_inputs
from qualify.numerics.inputs import build_problem, cell_seed, contract_violation, describe_cell
from qualify.numerics.metrics import worst_of
from qualify.numerics.oracle import fp32_reference, independent_attention, injection_layout_f64
from qualify.results import Check, ItemOutcome

if TYPE_CHECKING:
    from qualify.compile import GateItem
    from qualify.context import RunContext
    from qualify.numerics.cell import KernelNumericsParams

# fp32 against float64 over up to ~700 keys differs by ~1e-6 (rounding); 1e-4 leaves room for longer
# sequences, while a paging or masking mistake moves outputs by O(0.1) (tests/numerics show a wrong mask fails).
MAX_ABS_DIFF = 1e-4


def run_reference_check(item: GateItem, p: KernelNumericsParams, ctx: RunContext) -> ItemOutcome:
    """Worst max |reference - float64 attention| over `p.repeats` seeded host problems, against 1e-4."""
    m = describe_cell(p)
    outcome = ItemOutcome(measurements=m, inputs=kernel_inputs(), parameters=p.model_dump(mode="json"))
    violation = contract_violation(p)
    if violation:
        raise QualifyError(f"{item.name}: a reference cell must be inside the kernel contract ({violation})")
    worst = 0.0
    seeds = [cell_seed(ctx.seed, item.gate_file.suite, item.name, r) for r in range(p.repeats)]
    n = 0
    for seed in seeds:
        pr = build_problem(p, torch.device("cpu"), seed)
        ref = fp32_reference(pr)
        oracle = independent_attention(pr, injection_layout_f64(pr))
        # worst_of keeps a NaN (a broken reference or oracle) so the check fails instead of reading 0.
        worst = worst_of(worst, float((ref.double() - oracle).abs().max()))
        n += ref.numel()
    m.update(contract=False, max_abs_err=worst, seeds=seeds)
    outcome.checks.append(
        Check(
            name="fp32 reference vs float64 over the injection layout",
            observed=worst,
            operator="<=",
            threshold=MAX_ABS_DIFF,
            statistic="max |reference - independent float64 attention over cartridge pages + live pages|",
            n=n,
        )
    )
    return outcome
