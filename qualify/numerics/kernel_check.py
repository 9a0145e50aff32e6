"""`check: kernel`: the fused kernel against the fp32 reference (and FlashInfer) on fresh inputs per repeat.

A cell outside the kernel's documented contract is not measured: the kernel must reject it instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from qualify.errors import QualifyError
from qualify.numerics.fused import kernel_device, kernel_inputs, launch, run_fused
from qualify.numerics.inputs import build_problem, cell_seed, contract_violation, describe_cell
from qualify.numerics.metrics import ErrorStats, OracleTie, tolerance_checks
from qualify.numerics.oracle import (
    SECOND_ORACLE_NAME,
    flashinfer_oracle,
    float64_reference,
    fp32_reference,
    rounded_reference,
    want_second_oracle,
)
from qualify.numerics.rejection import LAYOUT_ERROR, expect_rejection, rejection_check
from qualify.results import Check, ItemOutcome

if TYPE_CHECKING:
    from qualify.compile import GateItem
    from qualify.context import RunContext
    from qualify.numerics.cell import KernelNumericsParams


def run_kernel_check(item: GateItem, p: KernelNumericsParams, ctx: RunContext) -> ItemOutcome:
    """Measure the kernel over `p.repeats` seeded problems, or show it rejects a cell outside its contract."""
    import cartridge_attn as ca

    device = kernel_device(p)
    m = describe_cell(p)
    impl = p.prefill_impl if p.phase == "prefill" else "triton"
    outcome = ItemOutcome(measurements=m, inputs=kernel_inputs(impl), parameters=p.model_dump(mode="json"))
    seeds = [cell_seed(ctx.seed, item.gate_file.suite, item.name, r) for r in range(p.repeats)]

    violation = contract_violation(p)
    if violation:
        # Outside the contract: the kernel must refuse, whatever the matrix asked for.
        raised = expect_rejection(
            lambda: run_fused(build_problem(p, device, seeds[0]), p.prefill_impl, p.decode_cascade)
        )
        m.update(contract=True, expected_error=LAYOUT_ERROR, raised=repr(raised), violation=violation)
        outcome.checks.append(rejection_check(f"rejects {violation}", raised))
        m["seeds"] = seeds[:1]
        return outcome

    errors: ErrorStats | None = None
    oracle_errors: ErrorStats | None = None
    attn = None
    n_elems = 0
    second = want_second_oracle(p, device)
    tied: OracleTie | None = None
    relaunch_diff = 0
    for seed in seeds:
        pr = build_problem(p, device, seed)
        out, attn = run_fused(pr, p.prefill_impl, p.decode_cascade)
        # Serving runs one plan for every layer (and CUDA graphs replay it): a second launch of the same plan
        # must write the same output, e.g. split decode must re-arm its arrival counters.
        again = launch(attn, pr)
        relaunch_diff += int((again.view(torch.int16) != out.view(torch.int16)).sum())  # bits: NaN too
        e = ErrorStats.between(out, fp32_reference(pr), p.rtol, p.atol)
        errors = e if errors is None else errors.worst(e)
        n_elems += out.numel()
        accepted = flashinfer_oracle(pr) if second else rounded_reference(pr)
        if second:
            oe = ErrorStats.between(out, accepted, p.rtol, p.atol)
            oracle_errors = oe if oracle_errors is None else oracle_errors.worst(oe)
        tie = OracleTie.measure(out, accepted, float64_reference(pr), p, SECOND_ORACLE_NAME if second else None)
        tied = tie if tied is None or tie.closer_to_bound_than(tied) else tied
    assert errors is not None  # repeats >= 1 (the schema's bound)
    identity = ca.kernel_identity(attn)
    launched = (identity.get("config") or {}).get("impl")
    if launched != impl:
        # A cell that asked for one implementation and measured another would qualify what it never launched.
        raise QualifyError(f"{item.name}: the cell asks for the {impl} kernel, the wrapper launched {launched}")
    cascaded = bool((identity.get("config") or {}).get("cart_rows"))
    if p.decode_cascade is not None and cascaded != p.decode_cascade:
        raise QualifyError(
            f"{item.name}: the cell asks for decode_cascade {p.decode_cascade}, the launch had {cascaded}"
        )
    # A passing cell vouches for the compiled variant it launched; under the interpreter, for none.
    if not identity.get("interpreted") and identity.get("specialization"):
        outcome.qualifies.append(identity["specialization"])
    m.update(
        contract=False,
        max_abs_err=errors.max_abs,
        max_rel_err=errors.max_rel,
        rel_l2=errors.rel_l2,
        nan_count=errors.nan_count,
        violations=errors.violations,
        seeds=seeds,
        kernel=identity,
        second_oracle=None
        if oracle_errors is None
        else {"name": SECOND_ORACLE_NAME, "max_abs_err": oracle_errors.max_abs, "rel_l2": oracle_errors.rel_l2},
    )
    assert tied is not None
    m.update(rel_l2_f64=tied.kernel, oracle_rel_l2_f64=tied.oracle, oracle_f64=tied.oracle_name)
    outcome.checks.extend(tolerance_checks("", errors, p, n_elems))
    outcome.checks.append(
        Check(
            name="a second launch of the same plan",
            observed=float(relaunch_diff),
            operator="<=",
            threshold=0.0,
            statistic="output elements whose bits differ from the first launch's (both outputs poisoned first)",
            n=n_elems,
        )
    )
    m["relaunch_mismatches"] = relaunch_diff
    outcome.checks.append(tied.check(n_elems))
    if oracle_errors is not None:
        # The NaN count is of the kernel's own output, already checked against the reference above.
        outcome.checks.extend(tolerance_checks("vs FlashInfer injection: ", oracle_errors, p, n_elems)[1:])
    elif device.type == "cuda":
        outcome.notes.append(
            "second oracle (FlashInfer) not run: " + ("disabled" if p.second_oracle == "none" else "not installed")
        )
    return outcome
