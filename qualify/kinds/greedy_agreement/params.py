"""Fields and lint of `greedy_agreement`: serving layouts against a reference layout, greedy tokens of real prompts.

One item serves the workload's first `prompts` eval questions behind the cartridge of `checkpoint` in the
reference layout and in every candidate (`qualify serve-agreement generate`: one vLLM process each, fresh, several
at once), `max_tokens` greedy tokens each, and compares each candidate with the reference:

* token identity (`token_identity: true`): every prompt's tokens equal the reference's; a divergence is excused only
  where the reference's top-1 and top-2 log-probabilities are an exact tie (below `tie_nats`, the float32
  rounding of vLLM's log-softmax). vLLM's logits are BF16 values, so within a binade a nonzero margin is at least
  one BF16 step: this is the rule "no excuse unless the margin is below one BF16 step". A prompt ends its
  comparison at its first divergence (the continuations differ from there on).
* log-probabilities (`max_mean_logprob_diff`): the mean |candidate - reference| log-probability of the reference's
  token over the shared greedy prefix, and the reference's token inside the candidate's top-k at every such
  position.

The comparison is vacuous when ties end it early: fewer than `min_compared_fraction` of the prompts x max_tokens
positions compared makes the item INCOMPLETE. A candidate may be the reference layout itself in the other
execution mode (`eager: true`): the same attention kernel with other kernels around it, which shows what rounding
alone does to this rule.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from qualify.registry import LintIssue
from qualify.schema.models import KindParams, StrictModel
from qualify.worker_groups import SERVING


class Candidate(StrictModel):
    """One serving layout compared with the reference, and what it must show."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    layout: str  # a serving layout (qualify.serve.layouts.LAYOUTS)
    eager: bool = False  # vLLM's eager mode instead of torch.compile with CUDA graphs
    token_identity: bool = True
    max_mean_logprob_diff: float | None = Field(default=None, gt=0)


class GreedyAgreementParams(KindParams):
    threshold_fields: ClassVar[dict[str, Any]] = {"candidates": {"__all__": {"max_mean_logprob_diff"}}}

    workload: str
    checkpoint: str
    reference: str = "bf16-prefix-cached"
    candidates: list[Candidate] = Field(min_length=1)
    prompts: int = Field(default=8, ge=1, le=64)
    max_tokens: int = Field(default=64, ge=1, le=512)
    tie_nats: float = Field(default=1e-6, gt=0, le=1e-3)
    min_compared_fraction: float = Field(default=0.5, gt=0, le=1)
    engines_at_once: int = Field(default=1, ge=1, le=16)
    worker_timeout_s: float = Field(default=600.0, gt=0)


def lint(params: KindParams, gate_file: object) -> list[LintIssue]:
    assert isinstance(params, GreedyAgreementParams)
    from qualify.serve.layouts import LAYOUTS

    issues: list[LintIssue] = []
    workloads = getattr(gate_file, "workloads", {})
    wl = workloads.get(params.workload)
    if wl is None:
        known = ", ".join(sorted(workloads)) or "none declared"
        return [LintIssue(("workload",), f"unknown workload {params.workload!r} (known: {known})")]
    if params.checkpoint not in wl.cartridges:
        known = ", ".join(sorted(wl.cartridges)) or "none declared"
        issues.append(
            LintIssue(("checkpoint",), f"workload {params.workload!r} has no cartridge {params.checkpoint!r} ({known})")
        )
    if wl.eval_set is None:
        issues.append(LintIssue(("workload",), f"workload {params.workload!r} declares no eval_set (the questions)"))
    known_layouts = ", ".join(sorted(LAYOUTS))
    if params.reference not in LAYOUTS:
        issues.append(LintIssue(("reference",), f"unknown serving layout {params.reference!r} ({known_layouts})"))
    seen: set[str] = set()
    for i, c in enumerate(params.candidates):
        if c.layout not in LAYOUTS:
            issues.append(
                LintIssue(("candidates", i, "layout"), f"unknown serving layout {c.layout!r} ({known_layouts})")
            )
        if c.id in seen:
            issues.append(LintIssue(("candidates", i, "id"), f"candidate id {c.id!r} appears twice"))
        seen.add(c.id)
        if c.layout == params.reference and not c.eager:
            issues.append(LintIssue(("candidates", i), "the reference itself, served the same way: nothing to compare"))
        if not c.token_identity and c.max_mean_logprob_diff is None:
            issues.append(
                LintIssue(("candidates", i), "neither token_identity nor max_mean_logprob_diff: nothing could fail")
            )
    return issues


def worker_group(params: KindParams) -> str | None:
    """Generations are kept in the run's store beside the served scores."""
    return SERVING
