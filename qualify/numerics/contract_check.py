"""`check: contract`: a named unsupported case must raise the documented error naming what is broken.

Each case breaks exactly one thing in an otherwise valid cell, and the error must name that thing, so a
rejection for some other reason cannot pass the cell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from qualify.errors import QualifyError
from qualify.numerics.fused import kernel_inputs, run_fused
from qualify.numerics.inputs import build_problem, cell_seed, contract_violation, describe_cell
from qualify.numerics.rejection import ARCH_ERROR, LAYOUT_ERROR, expect_rejection, rejection_check
from qualify.results import Check, ItemOutcome

if TYPE_CHECKING:
    from qualify.compile import GateItem
    from qualify.context import RunContext
    from qualify.numerics.cell import KernelNumericsParams

# What the documented error must name for each case.
CASE_FIELD = {
    "misaligned_cartridge": "cartridge_len",
    "zero_live": "live tokens",
    "unsupported_head_dim": "head_dim",
    "fp8_keys": "K dtype",
    "non_sm90": "compute capability",
}

# Shown to the architecture guard on an SM90 host: SM89 (Ada), a real GPU the kernel is not qualified on.
UNQUALIFIED_CAPABILITY = (8, 9)


def broken_cell(p: KernelNumericsParams) -> KernelNumericsParams:
    """`p` with the one field its case breaks (cases checked on plan arguments or the device keep `p`)."""
    if p.case == "misaligned_cartridge":
        length = p.cartridge.length if p.cartridge.length % p.page_size else p.cartridge.length + 1
        return p.model_copy(update={"cartridge": p.cartridge.model_copy(update={"length": length})})
    if p.case == "zero_live":
        return p.model_copy(update={"batch": p.batch.model_copy(update={"live_lens": [*p.batch.live_lens[:-1], 0]})})
    if p.case == "unsupported_head_dim":
        return p.model_copy(update={"head_dim": 96})
    return p


def _fp8_key_checks(cell: KernelNumericsParams, device: torch.device, seed: int) -> list[Check]:
    """FP8 keys are refused by plan() for either source, and by run() for cartridge keys on a GPU."""
    from cartridge_attn import CartridgeAttention

    pr = build_problem(cell, device, seed)
    kw = pr.plan_kwargs()
    attn = CartridgeAttention()
    checks = []
    for where, dtype_kw in (("cartridge", "cartridge_k_dtype"), ("live", "live_k_dtype")):
        raised = expect_rejection(
            lambda k=dtype_kw: attn.plan(*pr.page_table(), device=device, **{k: torch.float8_e4m3fn}, **kw)
        )
        checks.append(rejection_check(f"rejects FP8 {where} keys at plan()", raised, field=CASE_FIELD["fp8_keys"]))
    if device.type == "cuda":
        attn.plan(*pr.page_table(), device=device, **kw)
        fp8_k = pr.cartridge_k.to(torch.float8_e4m3fn)
        raised = expect_rejection(lambda: attn.run(pr.q, fp8_k, pr.cartridge_v, pr.paged_kv, **pr.run_kwargs()))
        checks.append(rejection_check("rejects FP8 cartridge keys at run()", raised, served="SERVED"))
    return checks


def _non_sm90_check(cell: KernelNumericsParams, device: torch.device, seed: int, notes: list[str]) -> Check:
    """The architecture guard refuses a non-SM90 GPU: this one, or on an SM90 host a capability passed to it."""
    from cartridge_attn import CartridgeAttention

    if device.type != "cuda":
        raise QualifyError("the non_sm90 contract cell needs a CUDA device (declare requires: [cuda])")
    pr = build_problem(cell, device, seed)
    capability = None
    if torch.cuda.get_device_capability(device) == (9, 0):
        # The only GPU here is SM90: the guard is exercised by presenting an SM89 capability to it.
        notes.append("host GPU is SM90; the architecture guard was shown an SM89 (Ada) capability")
        capability = UNQUALIFIED_CAPABILITY
    raised = expect_rejection(
        lambda: CartridgeAttention().plan(
            *pr.page_table(), device=device, device_capability=capability, **pr.plan_kwargs()
        )
    )
    return rejection_check(
        "rejects a non-SM90 GPU", raised, expected=ARCH_ERROR, field=CASE_FIELD["non_sm90"], served="SERVED"
    )


def run_contract_check(item: GateItem, p: KernelNumericsParams, ctx: RunContext) -> ItemOutcome:
    """Break the one field `p.case` names in a valid cell; the kernel must refuse it with the documented error."""
    if contract_violation(p):
        raise QualifyError(f"{item.name}: a contract cell starts from a valid cell ({contract_violation(p)})")
    # Host tensors suffice for layout cases: every layout check happens in plan() before the device is used.
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    seed = cell_seed(ctx.seed, item.gate_file.suite, item.name, 0)
    cell = broken_cell(p)
    m = describe_cell(cell)
    m.update(contract=True, expected_error=LAYOUT_ERROR, case=p.case, seeds=[seed])
    outcome = ItemOutcome(measurements=m, inputs=kernel_inputs(), parameters=p.model_dump(mode="json"))
    case = p.case
    if case in ("misaligned_cartridge", "unsupported_head_dim", "zero_live"):
        raised = expect_rejection(lambda: run_fused(build_problem(cell, device, seed)))
        outcome.checks.append(rejection_check(f"rejects {case.replace('_', ' ')}", raised, field=CASE_FIELD[case]))
    elif case == "fp8_keys":
        outcome.checks.extend(_fp8_key_checks(cell, device, seed))
    elif case == "non_sm90":
        outcome.checks.append(_non_sm90_check(cell, device, seed, outcome.notes))
        m["expected_error"] = ARCH_ERROR
    m["raised"] = [c.statistic for c in outcome.checks]
    return outcome
