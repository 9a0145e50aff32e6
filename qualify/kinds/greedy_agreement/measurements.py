"""The typed measurements of one `greedy_agreement` item: per candidate, where it left the reference's greedy
tokens (with the reference's margin there) and how far its log-probabilities moved. Thresholds are in the checks."""

from __future__ import annotations

from qualify.schema.models import MeasurementModel


class Divergence(MeasurementModel):
    prompt: int
    position: int
    reference_token: int
    candidate_token: int
    reference_margin: float | None  # top-1 minus top-2 log-probability of the reference there (nats)
    tie: bool  # excused: an exact tie of the reference's top two


class MarginCounts(MeasurementModel):
    """The reference's top-1 minus top-2 margins over every generated position, by size: how many positions a
    rounding difference could flip at all."""

    positions: int
    ties: int
    below_0_125: int  # nonzero, under 0.125 nats
    below_0_25: int
    below_0_5: int
    larger: int


class CandidateAgreement(MeasurementModel):
    id: str
    layout: str
    eager: bool
    description: str
    token_identity: bool
    identical_prompts: int
    compared_tokens: int
    ties: list[Divergence]
    failures: list[Divergence]
    logprob_positions: int
    logprob_missing: int  # compared positions where the reference's token is outside the candidate's top-k
    mean_abs_logprob_diff: float
    max_abs_logprob_diff: float
    fused_direct_launches: bool | None = None
    wall_s: float | None = None


class GreedyAgreementMeasurements(MeasurementModel):
    workload: str
    checkpoint: str
    model_dir: str
    cartridge_sha256: str | None
    reference: str
    reference_eager: bool
    prompts: int
    max_tokens: int
    tie_nats: float
    block_size: int | None
    reference_cartridge_positions_cached: list[int]  # per prompt, what the prefix cache held of the cartridge
    reference_margins: MarginCounts
    candidates: list[CandidateAgreement]
    engines_at_once: int
