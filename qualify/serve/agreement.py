"""Do two serving layouts produce the same greedy tokens, and how far apart are their log-probabilities?

Pure Python over the records `qualify.serve.e2e` writes (one per layout, from fresh processes), so the
decision rules are tested on CPU.

Token identity: for every prompt, the candidate's greedy tokens must equal the reference's. Two correct
BF16 attention kernels still round differently, so where the reference's top-1 and top-2 log-probabilities
are closer than ``tie_eps`` (a numerical tie) a different choice is not evidence of a bug; such a divergence
is reported as a tie and ends the comparison of that prompt (the continuations differ from there on). Any
other divergence fails.

Log-probability tolerance: over the positions where both generated the same prefix, the candidate's
log-probability of the reference's token, against the reference's own.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Generation:
    tokens: list[int]
    top_logprobs: list[dict[int, float]]  # per generated position: token id -> logprob (top-k)


@dataclass(frozen=True)
class Divergence:
    prompt: int
    position: int
    reference_token: int
    candidate_token: int
    reference_margin: float | None  # top-1 minus top-2 logprob of the reference at that position
    tie: bool


@dataclass
class TokenIdentity:
    prompts: int
    identical: int
    ties: list[Divergence] = field(default_factory=list)
    failures: list[Divergence] = field(default_factory=list)
    compared_tokens: int = 0

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompts": self.prompts,
            "identical_prompts": self.identical,
            "compared_tokens": self.compared_tokens,
            "ties": [d.__dict__ for d in self.ties],
            "failures": [d.__dict__ for d in self.failures],
            "passed": self.passed,
        }


def _margin(top: dict[int, float]) -> float | None:
    vals = sorted(top.values(), reverse=True)
    return vals[0] - vals[1] if len(vals) >= 2 else None


def token_identity(reference: list[Generation], candidate: list[Generation], *, tie_eps: float) -> TokenIdentity:
    if len(reference) != len(candidate):
        raise ValueError(f"{len(reference)} reference prompts vs {len(candidate)} candidate prompts")
    out = TokenIdentity(prompts=len(reference), identical=0)
    for i, (ref, cand) in enumerate(zip(reference, candidate, strict=True)):
        if len(ref.tokens) != len(cand.tokens):
            raise ValueError(f"prompt {i}: {len(ref.tokens)} reference tokens vs {len(cand.tokens)} candidate tokens")
        for pos, (a, b) in enumerate(zip(ref.tokens, cand.tokens, strict=True)):
            out.compared_tokens += 1
            if a == b:
                continue
            margin = _margin(ref.top_logprobs[pos]) if pos < len(ref.top_logprobs) else None
            tie = margin is not None and margin < tie_eps
            (out.ties if tie else out.failures).append(Divergence(i, pos, a, b, margin, tie))
            break
        else:
            out.identical += 1
    return out


@dataclass(frozen=True)
class LogprobAgreement:
    positions: int
    missing: int  # positions where the reference token was outside the candidate's top-k
    mean_abs_diff: float
    max_abs_diff: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.positions > 0 and self.missing == 0 and self.mean_abs_diff <= self.tolerance

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "passed": self.passed}


def logprob_agreement(
    reference: list[Generation], candidate: list[Generation], *, tolerance: float
) -> LogprobAgreement:
    """Mean |candidate - reference| log-probability of the reference's token over the shared greedy prefix."""
    diffs: list[float] = []
    missing = 0
    for ref, cand in zip(reference, candidate, strict=True):
        for pos, (a, b) in enumerate(zip(ref.tokens, cand.tokens, strict=True)):
            ref_lp = ref.top_logprobs[pos].get(a)
            cand_lp = cand.top_logprobs[pos].get(a)
            if ref_lp is None or cand_lp is None:
                missing += 1
            else:
                diffs.append(abs(cand_lp - ref_lp))
            if a != b:
                break
    return LogprobAgreement(
        positions=len(diffs),
        missing=missing,
        mean_abs_diff=statistics.fmean(diffs) if diffs else float("nan"),
        max_abs_diff=max(diffs) if diffs else float("nan"),
        tolerance=tolerance,
    )


def generations_from_json(records: list[dict[str, Any]]) -> list[Generation]:
    return [
        Generation(
            tokens=[int(t) for t in r["tokens"]],
            top_logprobs=[{int(k): float(v) for k, v in pos.items()} for pos in r["top_logprobs"]],
        )
        for r in records
    ]
