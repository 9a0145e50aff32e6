"""Run one `loss_increase` item: one checkpoint of a workload, every declared layout, against BF16.

Measurements: `LossIncreaseMeasurements` (what `qualify render` plots); each bound is in its check only.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from pydantic import TypeAdapter

from qualify.cartridge.manifest import load_verified_cartridge, manifest_path
from qualify.cartridge.types import Cartridge, ModelKVShape
from qualify.compile import GateItem
from qualify.context import RunContext
from qualify.errors import DataError, InsensitiveMeasurementError, QualifyError
from qualify.hashing import sha256_file
from qualify.kinds.loss_increase.measurements import (
    CpuAgreement,
    LayoutLoss,
    LossIncreaseMeasurements,
    PayloadRow,
    PerItemLoss,
    ReferenceLoss,
    ServedRun,
    bound_check_name,
)
from qualify.kinds.loss_increase.params import LossIncreaseParams
from qualify.kinds.loss_increase.vllm_backend import ServedComparison, evaluate_layouts_vllm
from qualify.loss.data import EvalSet, load_eval_set
from qualify.loss.evaluate import LayoutComparison, LayoutResult, LossResult, evaluate_layouts, evaluate_loss
from qualify.models.gguf_cache import converted_gguf
from qualify.models.loader import LoadedModel, directory_weights_sha256, load_causal_lm, package_gguf_path
from qualify.models.spec import ModelSpec, PathSpec
from qualify.quant.payload import payload_table
from qualify.results import Check, InputRef, ItemOutcome, Table
from qualify.serve.score_processes import SCORES_MEMO
from qualify.stats.bootstrap import bootstrap_indices, ratio_of_sums_ci

_MODEL_SPEC = TypeAdapter(ModelSpec)


@dataclass(frozen=True)
class _ModelFacts:
    """What the report says of the model, whichever backend ran it."""

    model_id: str
    kv_shape: ModelKVShape
    weights_sha256: str
    device: str
    dtype: str


def _spec(item: GateItem, params: LossIncreaseParams) -> ModelSpec:
    raw = dict(item.gate_file.workloads[params.workload].model)
    if params.device != "auto":
        raw["device"] = params.device
    if raw.get("source") == "path" and "path" in raw:
        raw["path"] = str(item.gate_file.resolve(raw["path"]))
    try:
        return _MODEL_SPEC.validate_python(raw)
    except ValueError as exc:
        raise DataError(item.gate_file.path, f"workload {params.workload!r}: invalid model: {exc}") from None


def _model(item: GateItem, params: LossIncreaseParams, ctx: RunContext) -> LoadedModel:
    spec = _spec(item, params)
    return ctx.memo(("model", spec.model_dump_json()), lambda: load_causal_lm(spec))


def _facts(loaded: LoadedModel) -> _ModelFacts:
    return _ModelFacts(loaded.model_id, loaded.kv_shape, loaded.weights_sha256, str(loaded.device),
                       str(loaded.dtype).removeprefix("torch."))  # fmt: skip


def _served_model(item: GateItem, params: LossIncreaseParams) -> tuple[Path, _ModelFacts]:
    """backend vllm: the model's Hugging Face folder (a GGUF converted once into the cache) and its facts."""
    spec = _spec(item, params)
    if isinstance(spec, PathSpec):
        directory = Path(spec.path).expanduser()
        if not (directory / "config.json").is_file():
            raise DataError(str(directory), "not a Hugging Face model directory (no config.json)")
        model_id, digest = directory.name, directory_weights_sha256(directory)
    else:
        converted = converted_gguf(package_gguf_path(spec))
        directory, model_id, digest = converted.directory, spec.file.removesuffix(".gguf"), converted.gguf_sha256
    config = SimpleNamespace(**json.loads((directory / "config.json").read_text()))
    return directory, _ModelFacts(model_id, ModelKVShape.from_hf_config(config), digest, "cuda (vLLM)", "bfloat16")


def _eval_set(path: Path, max_items: int | None, ctx: RunContext) -> EvalSet:
    full = ctx.memo(("eval-set", str(path)), lambda: load_eval_set(path))
    if max_items is None or max_items >= len(full.items):
        return full
    return EvalSet(path=full.path, sha256=full.sha256, tokenizer=full.tokenizer, items=full.items[:max_items])


def _check(r: LayoutResult, bound: float, params: LossIncreaseParams, n: int) -> Check:
    pct = round(params.confidence * 100)
    return Check(
        name=bound_check_name(r.layout.value),
        observed=r.rel_increase,
        operator="<=",
        threshold=bound,
        statistic=f"(loss - BF16 loss) / BF16 loss over answer tokens; paired bootstrap {pct}% CI over sequences",
        n=n,
        ci_low=r.ci_low,
        ci_high=r.ci_high,
        decided_on=r.ci_high if params.decide_on == "ci" else r.rel_increase,
        unit="fraction",
    )


def _control_check(cmp: LayoutComparison, params: LossIncreaseParams, seed: int) -> Check:
    control = params.positive_control
    r = next(x for x in cmp.layouts if x.layout.value == control.layout)
    n = cmp.reference.n_items
    pct = round(params.confidence * 100)
    if control.metric == "rel_increase":
        observed, low, high, unit = r.rel_increase, r.ci_low, r.ci_high, "fraction"
        statistic = f"relative eval-loss increase; paired bootstrap {pct}% CI over sequences"
    else:
        scores = next(s for s in cmp.items.by_layout if s.layout.value == control.layout)
        indices = bootstrap_indices(n, np.random.default_rng(seed), params.n_resamples)
        ci = ratio_of_sums_ci(scores.kl, cmp.items.tokens, indices, params.confidence)
        observed, low, high, unit = ci.estimate, ci.low, ci.high, "nats"
        statistic = f"KL(BF16 || layout) per answer token; bootstrap {pct}% CI over sequences"
    return Check(
        name=f"positive control: {control.layout} must show key damage ({control.metric})",
        observed=observed,
        operator=">=",
        threshold=control.minimum,
        statistic=statistic + "; if it does not fire the measurement is blind",
        n=n,
        ci_low=low,
        ci_high=high,
        decided_on=low if params.decide_on == "ci" else observed,
        unit=unit,
    )


@dataclass(frozen=True)
class _CpuLoss:
    result: LossResult
    dtype: str
    seconds: float


def _cpu_loss(
    item: GateItem, params: LossIncreaseParams, ctx: RunContext, cartridge: Cartridge, eval_set: EvalSet
) -> _CpuLoss:
    """The CPU gate's evaluation (Hugging Face, float32) of the BF16 cartridge on the same weights and items."""
    spec = _spec(item, params).model_copy(update={"device": "cpu", "dtype": "float32"})
    model = ctx.memo(("model", spec.model_dump_json()), lambda: load_causal_lm(spec))
    began = time.perf_counter()
    result = evaluate_loss(model.model, cartridge, eval_set, batch_size=params.batch_size)
    return _CpuLoss(result, str(model.dtype).removeprefix("torch."), time.perf_counter() - began)


def _cpu_agreement(cmp: LayoutComparison, cpu: _CpuLoss, params: LossIncreaseParams, seed: int) -> CpuAgreement:
    if tuple(cmp.items.ids) != cpu.result.item_ids:
        raise QualifyError("the CPU evaluation and the serving path scored different items")
    if not np.array_equal(cmp.items.tokens, cpu.result.item_tokens):
        raise QualifyError("the CPU evaluation and the serving path scored different answer tokens")
    indices = bootstrap_indices(len(cpu.result.item_ids), np.random.default_rng(seed), params.n_resamples)
    ci = ratio_of_sums_ci(cmp.items.reference_nll, cpu.result.item_nll, indices, params.confidence)
    return CpuAgreement(cpu_loss=cpu.result.loss, served_loss=cmp.reference.loss, ratio=ci.estimate,
                        ci_low=ci.low, ci_high=ci.high, cpu_dtype=cpu.dtype,
                        cpu_seconds=round(cpu.seconds, 2))  # fmt: skip


def _cpu_check(a: CpuAgreement, params: LossIncreaseParams, n: int) -> Check:
    assert params.cpu_reference is not None
    pct = round(params.confidence * 100)
    worst = max(abs(a.ci_low - 1.0), abs(a.ci_high - 1.0)) if params.decide_on == "ci" else abs(a.ratio - 1.0)
    return Check(
        name="served BF16 loss agrees with the CPU evaluation (|served / CPU - 1|)",
        observed=a.ratio - 1.0,
        operator="<=",
        threshold=params.cpu_reference.tolerance,
        statistic=f"summed answer NLL, served (BF16, vLLM) / CPU ({a.cpu_dtype}, Hugging Face) - 1; paired "
        f"bootstrap {pct}% CI over sequences, decided on its farther end from 0",
        n=n,
        ci_low=a.ci_low - 1.0,
        ci_high=a.ci_high - 1.0,
        decided_on=worst,
        unit="fraction",
    )


def _measurements(
    params: LossIncreaseParams, loaded: _ModelFacts, cmp: LayoutComparison, cartridge_tokens: int
) -> LossIncreaseMeasurements:
    control = params.positive_control.layout
    return LossIncreaseMeasurements(
        workload=params.workload,
        checkpoint=params.checkpoint,
        model_id=loaded.model_id,
        scaling=params.scaling,
        decide_on=params.decide_on,
        confidence=params.confidence,
        reference=ReferenceLoss(
            loss=cmp.reference.loss, n_items=cmp.reference.n_items, n_tokens=cmp.reference.n_tokens
        ),
        layouts=[
            LayoutLoss(
                layout=r.layout.value,
                loss=r.loss,
                rel_increase=r.rel_increase,
                ci_low=r.ci_low,
                ci_high=r.ci_high,
                kl_mean=r.kl_mean,
                top1_agreement=r.top1_agreement,
                saturated_k=r.saturated_k,
                saturated_v=r.saturated_v,
                positive_control=r.layout.value == control,
            )
            for r in cmp.layouts
        ],
        payload=[
            PayloadRow(
                layout=row.layout.value,
                bytes_per_token=row.bytes_per_token,
                context_bytes=row.context_bytes,
                cartridge_bytes=row.cartridge_bytes,
                capacity_ratio=row.capacity_ratio,
            )
            for row in payload_table(loaded.kv_shape, cartridge_tokens, params.context_tokens)
        ],
        per_item=PerItemLoss(
            ids=list(cmp.items.ids),
            tokens=cmp.items.tokens.tolist(),
            reference_nll=cmp.items.reference_nll.tolist(),
            nll={s.layout.value: s.nll.tolist() for s in cmp.items.by_layout},
        ),
    )


def _tables(params: LossIncreaseParams, cmp: LayoutComparison, m: LossIncreaseMeasurements) -> list[Table]:
    by_layout = {r.layout.value: r for r in cmp.layouts}
    k16v8, k8v8 = by_layout.get("K16/V8"), by_layout.get("K8/V8")

    def pct(r: LayoutResult | None) -> str:
        return "-" if r is None else f"{r.rel_increase * 100:+.3f} % [{r.ci_low * 100:+.3f}, {r.ci_high * 100:+.3f}]"

    summary = Table(
        title="Cartridge loss by checkpoint",
        columns=["checkpoint", "BF16 eval loss", "K16/V8 increase", "K8/V8 eval loss", "K8/V8 increase"],
        rows=[[params.checkpoint, round(cmp.reference.loss, 5), pct(k16v8), k8v8 and round(k8v8.loss, 5), pct(k8v8)]],
    )
    detail = Table(
        title=f"Layouts for {params.checkpoint} ({cmp.reference.n_items} sequences, {cmp.reference.n_tokens} tokens)",
        columns=["layout", "eval loss", "rel. increase", "CI", "KL(BF16||layout)", "top-1 agreement", "saturated K/V"],
        rows=[
            [
                r.layout.value,
                round(r.loss, 5),
                f"{r.rel_increase * 100:+.4f} %",
                f"[{r.ci_low * 100:+.4f}, {r.ci_high * 100:+.4f}] %",
                f"{r.kl_mean:.3e}",
                f"{r.top1_agreement:.4f}",
                f"{r.saturated_k}/{r.saturated_v}",
            ]
            for r in cmp.layouts
        ],
    )
    payload = Table(
        title="Raw KV payload per layout",
        columns=["layout", "KiB / token", f"{params.context_tokens}-token context MiB", "cartridge MiB", "capacity"],
        rows=[
            [
                p.layout,
                round(p.bytes_per_token / 1024, 3),
                round(p.context_bytes / 2**20, 3),
                round(p.cartridge_bytes / 2**20, 3),
                f"{p.capacity_ratio:.3f}x",
            ]
            for p in m.payload
        ],
    )
    tables = [summary, detail, payload]
    if m.cpu_reference is not None:
        a = m.cpu_reference
        tables.append(Table(
            title=f"Served BF16 reference vs the CPU evaluation ({params.checkpoint})",
            columns=["CPU loss (Hugging Face)", "served loss (vLLM, BF16)", "served / CPU", "CI"],
            rows=[[round(a.cpu_loss, 5), round(a.served_loss, 5), f"{a.ratio:.5f}",
                   f"[{a.ci_low:.5f}, {a.ci_high:.5f}]"]],
        ))  # fmt: skip
    if m.served_runs:
        tables.append(Table(
            title="Scoring processes (vLLM)",
            columns=["run", "eager", "engines at once", "wall s"],
            rows=[[r.label, r.enforce_eager, r.engines_at_once, r.wall_s] for r in m.served_runs],
        ))  # fmt: skip
    return tables


def run(item: GateItem, ctx: RunContext) -> ItemOutcome:
    params = item.params
    assert isinstance(params, LossIncreaseParams)
    workload = item.gate_file.workloads[params.workload]
    if workload.eval_set is None:
        raise DataError(item.gate_file.path, f"workload {params.workload!r} declares no eval_set")
    cartridge_path = item.gate_file.resolve(workload.cartridges[params.checkpoint])
    eval_path = item.gate_file.resolve(workload.eval_set)
    eval_set = _eval_set(eval_path, params.max_items, ctx)
    layouts = list(params.max_rel_increase)
    if params.positive_control.layout not in layouts:
        layouts.append(params.positive_control.layout)
    torch.manual_seed(ctx.seed)

    def progress(done: int, total: int) -> None:
        ctx.progress("sequences" if params.backend == "hf" else "layouts in vLLM", done, total)

    # The same paired statistics for both backends.
    stats = {"scaling": params.scaling, "n_resamples": params.n_resamples, "confidence": params.confidence,
             "seed": ctx.seed, "progress": progress}  # fmt: skip
    served: ServedComparison | None = None
    if params.backend == "vllm":
        model_dir, loaded = _served_model(item, params)
        cartridge, manifest = load_verified_cartridge(cartridge_path, loaded.kv_shape)

        def cpu_evaluation() -> _CpuLoss | None:  # while the engines start: it needs only the CPU
            return None if params.cpu_reference is None else _cpu_loss(item, params, ctx, cartridge, eval_set)

        served = evaluate_layouts_vllm(model_dir=model_dir, cartridge_path=cartridge_path, cartridge=cartridge,
                                       eval_path=eval_path, layouts=layouts, timeout_s=params.worker_timeout_s,
                                       store=ctx.memo(SCORES_MEMO, dict), engines_at_once=params.engines_at_once,
                                       meanwhile=cpu_evaluation, **stats)  # fmt: skip
        cmp = served.comparison
    else:
        model = _model(item, params, ctx)
        loaded = _facts(model)
        cartridge, manifest = load_verified_cartridge(cartridge_path, model.kv_shape)
        cmp = evaluate_layouts(model.model, cartridge, eval_set, layouts, batch_size=params.batch_size, **stats)
    n = cmp.reference.n_items
    by_layout = {r.layout.value: r for r in cmp.layouts}
    checks = [_check(by_layout[name], bound, params, n) for name, bound in params.max_rel_increase.items()]
    control = _control_check(cmp, params, ctx.seed)
    checks.append(control)
    agreement = None
    if served is not None and served.meanwhile is not None:
        agreement = _cpu_agreement(cmp, served.meanwhile, params, ctx.seed)
        checks.append(_cpu_check(agreement, params, n))

    measurements = _measurements(params, loaded, cmp, cartridge.num_tokens).model_copy(
        update={"cpu_reference": agreement, "served_runs": served and [ServedRun(**r) for r in served.runs]}
    )
    outcome = ItemOutcome(
        checks=checks,
        measurements=measurements,
        tables=_tables(params, cmp, measurements),
        inputs=[
            InputRef(cartridge_path.name, str(cartridge_path), manifest.sha256, "cartridge"),
            InputRef(
                manifest_path(cartridge_path).name,
                str(manifest_path(cartridge_path)),
                sha256_file(manifest_path(cartridge_path)),
                "cartridge-manifest",
            ),
            InputRef(eval_path.name, str(eval_path), eval_set.sha256, "eval-set"),
            InputRef(loaded.model_id, loaded.model_id, loaded.weights_sha256, "model-weights"),
        ],
        parameters={
            **params.report_parameters(),
            "seed": ctx.seed,
            "device": loaded.device,
            "model_dtype": loaded.dtype,
            "cartridge_dtype": str(cartridge.dtype).removeprefix("torch."),
            "cartridge_tokens": cartridge.num_tokens,
            "frozen_tokens": cartridge.frozen_tokens,
        },
    )
    if not control.passed:
        pc = params.positive_control
        raise InsensitiveMeasurementError(
            f"{item.name}: the positive control {pc.layout} showed {pc.metric} {control.observed:.4g} (decided on "
            f"{control.value_decided:.4g}), below the {pc.minimum:.4g} it must show: this measurement cannot see "
            "key damage, so its other results prove nothing",
            outcome=outcome,
        )
    return outcome
