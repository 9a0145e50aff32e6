"""Run one `greedy_agreement` item: the reference and every candidate generate in their own vLLM processes (several
at once, `qualify.serve.score_processes.run_side_by_side`; kept in the run's store), then each candidate is
compared with the reference (`qualify.serve.agreement`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from qualify.compile import GateItem
from qualify.context import RunContext
from qualify.errors import DataError
from qualify.hashing import sha256_file
from qualify.kinds.greedy_agreement.measurements import (
    CandidateAgreement,
    Divergence,
    GreedyAgreementMeasurements,
    MarginCounts,
)
from qualify.kinds.greedy_agreement.params import Candidate, GreedyAgreementParams
from qualify.models.spec import ModelSpec, PathSpec
from qualify.results import Check, InputRef, ItemOutcome, Shortfall, Table
from qualify.serve.agreement import Generation, generations_from_json, logprob_agreement, token_identity
from qualify.serve.score_processes import ServedProcess, run_side_by_side

GENERATIONS_MEMO = ("serve-generations",)


@dataclass(frozen=True)
class _Served:
    """What every process of the item serves."""

    model_dir: Path
    cartridge: Path
    eval_set: Path
    prompts: int
    max_tokens: int


def _model_dir(item: GateItem, params: GreedyAgreementParams) -> Path:
    raw = dict(item.gate_file.workloads[params.workload].model)
    if raw.get("source") == "path" and "path" in raw:
        raw["path"] = str(item.gate_file.resolve(raw["path"]))
    try:
        spec = TypeAdapter(ModelSpec).validate_python(raw)
    except ValueError as exc:
        raise DataError(item.gate_file.path, f"workload {params.workload!r}: invalid model: {exc}") from None
    if isinstance(spec, PathSpec):
        directory = Path(spec.path).expanduser().resolve()
    else:
        from qualify.models.gguf_cache import converted_gguf
        from qualify.models.loader import package_gguf_path

        directory = converted_gguf(package_gguf_path(spec)).directory
    if not (directory / "config.json").is_file():
        raise DataError(str(directory), "not a Hugging Face model directory (no config.json)")
    return directory


def generate_command(layout: str, eager: bool, served: _Served, out: Path, memory_share: float) -> list[str]:
    return [sys.executable, "-m", "qualify.cli", "serve-agreement", "generate", "--layout", layout, "--out", str(out),
            "--model-dir", str(served.model_dir), "--cartridge", str(served.cartridge), "--eval-set",
            str(served.eval_set), "--prompts", str(served.prompts), "--max-tokens", str(served.max_tokens),
            "--gpu-memory-utilization", f"{memory_share:.4f}", *(["--eager"] if eager else [])]  # fmt: skip


def _job(layout: str, eager: bool, served: _Served) -> tuple[tuple[str, ...], ServedProcess]:
    key = ("greedy", str(served.model_dir), sha256_file(served.cartridge), sha256_file(served.eval_set), layout,
           str(eager), str(served.prompts), str(served.max_tokens))  # fmt: skip
    mode = "eager" if eager else "graphs"
    what = f"greedy tokens of {layout} ({mode})"
    return key, ServedProcess(what, f"{layout}-{mode}", lambda out, share: generate_command(layout, eager, served, out,
                                                                                             share))  # fmt: skip


def margin_counts(reference: list[Generation], tie_nats: float) -> MarginCounts:
    counts = {"ties": 0, "below_0_125": 0, "below_0_25": 0, "below_0_5": 0, "larger": 0}
    positions = 0
    for g in reference:
        for top in g.top_logprobs:
            values = sorted(top.values(), reverse=True)
            if len(values) < 2:
                continue
            positions += 1
            m = values[0] - values[1]
            key = ("ties" if m < tie_nats else "below_0_125" if m < 0.125 else "below_0_25" if m < 0.25
                   else "below_0_5" if m < 0.5 else "larger")  # fmt: skip
            counts[key] += 1
    return MarginCounts(positions=positions, **counts)


def _agreement(c: Candidate, doc: dict[str, Any], reference: list[Generation], tie_nats: float) -> CandidateAgreement:
    cand = generations_from_json(doc["records"])
    ident = token_identity(reference, cand, tie_eps=tie_nats)
    lp = logprob_agreement(reference, cand, tolerance=c.max_mean_logprob_diff or float("inf"))

    def div(d: Any) -> Divergence:
        return Divergence.model_validate(d.__dict__)

    return CandidateAgreement(
        id=c.id, layout=c.layout, eager=c.eager, description=str(doc.get("description", "")),
        token_identity=c.token_identity, identical_prompts=ident.identical, compared_tokens=ident.compared_tokens,
        ties=[div(d) for d in ident.ties], failures=[div(d) for d in ident.failures], logprob_positions=lp.positions,
        logprob_missing=lp.missing, mean_abs_logprob_diff=lp.mean_abs_diff, max_abs_logprob_diff=lp.max_abs_diff,
        fused_direct_launches=doc.get("fused_direct_launches"), wall_s=doc.get("process", {}).get("wall_s"),
    )  # fmt: skip


def _checks(c: Candidate, a: CandidateAgreement, params: GreedyAgreementParams) -> list[Check]:
    checks = []
    if c.token_identity:
        where = "; ".join(f"prompt {d.prompt} at {d.position}, reference margin {d.reference_margin:.4g}"
                          for d in a.failures if d.reference_margin is not None)  # fmt: skip
        checks.append(Check(
            name=f"{c.id}: greedy tokens identical to {params.reference}'s (divergences not at an exact tie)",
            observed=float(len(a.failures)), operator="<=", threshold=0.0,
            statistic=f"prompts whose first divergence is not at an exact tie (reference top-2 margin < "
                      f"{params.tie_nats:g} nats) over {params.prompts} prompts x {params.max_tokens} greedy tokens"
                      + (f"; failures: {where}" if where else ""),
            n=a.compared_tokens, unit="prompts",
        ))  # fmt: skip
    if c.max_mean_logprob_diff is not None:
        checks.append(Check(
            name=f"{c.id}: mean |log-prob difference| of the reference's tokens",
            observed=a.mean_abs_logprob_diff, operator="<=", threshold=c.max_mean_logprob_diff,
            statistic=f"mean over the {a.logprob_positions} positions of the shared greedy prefix (max "
                      f"{a.max_abs_logprob_diff:.4g})", n=a.logprob_positions, unit="nats",
        ))  # fmt: skip
        checks.append(Check(
            name=f"{c.id}: the reference's token within the candidate's top-k at every compared position",
            observed=float(a.logprob_missing), operator="<=", threshold=0.0,
            statistic="positions of the shared greedy prefix whose reference token the candidate did not rank",
            n=a.logprob_positions, unit="positions",
        ))  # fmt: skip
    return checks


def run(item: GateItem, ctx: RunContext) -> ItemOutcome:
    params = item.params
    assert isinstance(params, GreedyAgreementParams)
    workload = item.gate_file.workloads[params.workload]
    if workload.eval_set is None:
        raise DataError(item.gate_file.path, f"workload {params.workload!r} declares no eval_set")
    served = _Served(_model_dir(item, params), item.gate_file.resolve(workload.cartridges[params.checkpoint]),
                     item.gate_file.resolve(workload.eval_set), params.prompts, params.max_tokens)  # fmt: skip
    ref_key, ref_job = _job(params.reference, False, served)
    jobs = dict([(ref_key, ref_job), *(_job(c.layout, c.eager, served) for c in params.candidates)])
    store: dict[tuple[str, ...], dict[str, Any]] = ctx.memo(GENERATIONS_MEMO, dict)

    def progress(done: int, total: int) -> None:
        ctx.progress("layouts in vLLM", done, total)

    run_side_by_side(jobs, store=store, engines_at_once=params.engines_at_once, timeout_s=params.worker_timeout_s,
                     progress=progress)  # fmt: skip
    ref_doc = store[ref_key]
    reference = generations_from_json(ref_doc["records"])
    agreements = [
        _agreement(c, store[_job(c.layout, c.eager, served)[0]], reference, params.tie_nats) for c in params.candidates
    ]
    checks = [check for c, a in zip(params.candidates, agreements, strict=True) for check in _checks(c, a, params)]
    total = params.prompts * params.max_tokens
    shortfalls = [
        Shortfall(
            "vacuous",
            f"{a.id}: ties ended the comparison after {a.compared_tokens} of {total} tokens (below "
            f"{params.min_compared_fraction:g} of them)",
        )
        for c, a in zip(params.candidates, agreements, strict=True)
        if c.token_identity and a.compared_tokens < params.min_compared_fraction * total
    ]
    measurements = GreedyAgreementMeasurements(
        workload=params.workload, checkpoint=params.checkpoint, model_dir=str(served.model_dir),
        cartridge_sha256=ref_doc.get("cartridge_sha256"), reference=params.reference, reference_eager=False,
        prompts=params.prompts, max_tokens=params.max_tokens, tie_nats=params.tie_nats,
        block_size=ref_doc.get("block_size"),
        reference_cartridge_positions_cached=list(ref_doc.get("cartridge_positions_cached", [])),
        reference_margins=margin_counts(reference, params.tie_nats), candidates=agreements,
        engines_at_once=params.engines_at_once,
    )  # fmt: skip
    table = Table(
        title=f"Greedy agreement with {params.reference} ({params.checkpoint}, {params.prompts} prompts x "
        f"{params.max_tokens} tokens)",
        columns=["candidate", "prompts identical", "tokens compared", "divergences (prompt, position, ref. margin)",
                 "log-prob mean / max |diff|"],
        rows=[[a.id, f"{a.identical_prompts}/{params.prompts}", a.compared_tokens,
               "; ".join(f"({d.prompt}, {d.position}, {d.reference_margin:.4g}{' tie' if d.tie else ''})"
                         for d in [*a.ties, *a.failures] if d.reference_margin is not None) or "none",
               f"{a.mean_abs_logprob_diff:.4g} / {a.max_abs_logprob_diff:.4g}"] for a in agreements],
    )  # fmt: skip
    m = measurements.reference_margins
    notes = [
        f"reference margins over {m.positions} generated positions: {m.ties} exact ties, {m.below_0_125} below 0.125 "
        f"nats, {m.below_0_25} below 0.25, {m.below_0_5} below 0.5, {m.larger} larger (one BF16 step of a logit in "
        "[16, 32) is 0.125): how many positions any rounding difference could flip"
    ]
    inputs = [
        InputRef(served.cartridge.name, str(served.cartridge), sha256_file(served.cartridge), "cartridge"),
        InputRef(served.eval_set.name, str(served.eval_set), sha256_file(served.eval_set), "eval-set"),
    ]
    return ItemOutcome(checks=checks, measurements=measurements, tables=[table], inputs=inputs,
                       parameters=params.report_parameters(), notes=notes, shortfalls=shortfalls)  # fmt: skip
