"""Lint of `kernel_numerics` gates; the fields model is the numerics cell (`qualify.numerics.cell`)."""

from __future__ import annotations

from qualify.numerics.cell import KernelNumericsParams
from qualify.registry import LintIssue
from qualify.schema.models import KindParams

__all__ = ["KernelNumericsParams", "lint"]


def lint(params: KindParams, gate_file: object) -> list[LintIssue]:
    assert isinstance(params, KernelNumericsParams)
    issues = []
    if params.check == "contract" and params.case is None:
        issues.append(LintIssue(("case",), "a contract cell names the unsupported `case` it must reject"))
    if params.check != "contract" and params.case is not None:
        issues.append(LintIssue(("case",), "`case` only applies to check: contract"))
    if params.phase == "prefill" and params.batch.q_lens is None and params.check != "contract":
        issues.append(LintIssue(("batch",), f"prefill batch {params.batch.id!r} needs q_lens"))
    if params.kv_layout == "combined" and params.live_v != "bf16":
        issues.append(LintIssue(("kv_layout",), "FlashInfer's combined layout holds K and V in one dtype (bf16)"))
    if params.batch.q_lens and any(q > n for q, n in zip(params.batch.q_lens, params.batch.live_lens, strict=True)):
        issues.append(LintIssue(("batch",), "a request has more queries than live tokens (queries are live tokens)"))
    if params.prefill_impl != "triton" and (params.phase != "prefill" or params.check != "kernel"):
        # Decode and contract cells run the Triton kernel whatever the wrapper's prefill is: the cell would claim
        # to qualify an implementation it never launches.
        issues.append(LintIssue(("prefill_impl",), f"prefill_impl {params.prefill_impl!r} needs a prefill kernel cell"))
    if params.decode_cascade is not None and (params.phase != "decode" or params.check != "kernel"):
        issues.append(LintIssue(("decode_cascade",), "decode_cascade needs a decode kernel cell"))
    if params.envelope is not None and params.envelope.min_batch > 1 and params.phase != "decode":
        issues.append(LintIssue(("envelope", "min_batch"), "min_batch bounds decode batches, not a prefill envelope"))
    return issues
