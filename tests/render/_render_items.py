"""Synthetic items of the four plotted kinds, their measurements validated by each kind's model, for rendering tests."""

from __future__ import annotations

from typing import Any

from qualify.kinds.accuracy_floor.measurements import AccuracyFloorMeasurements
from qualify.kinds.kernel_numerics.measurements import KernelNumericsMeasurements
from qualify.kinds.loss_increase.measurements import LossIncreaseMeasurements
from qualify.kinds.perf_nonregression.measurements import PerfNonRegressionMeasurements
from qualify.results import Status, verdict

HOSTILE = "<script>alert('x')</script> & <img src=x onerror=alert(2)> | `tick` *star*"
LAYOUTS = ("K16/V16", "K16/V8", "K8/V16", "K8/V8")


def check(name: str, observed: float, op: str, threshold: float, outcome: str, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": name,
        "observed": observed,
        "operator": op,
        "threshold": threshold,
        "statistic": "bootstrap",
        "n": 400,
        "ci_low": None,
        "ci_high": None,
        "decided_on": None,
        "unit": "",
        "outcome": outcome,
        "passed": outcome == "pass",
    }
    return {**base, **extra}


def item(
    name: str,
    gate_id: str,
    kind: str,
    status: str,
    checks: list[dict[str, Any]],
    measurements: dict[str, Any],
    *,
    reason: str | None = None,
    tables: list[dict[str, Any]] | None = None,
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "nodeid": f"gates/synthetic.yaml::{name}",
        "name": name,
        "gate_id": gate_id,
        "cell": name.partition("[")[2].rstrip("]") or None,
        "kind": kind,
        "gate_file": "gates/synthetic.yaml",
        "requires": ["cpu"] if status != "skipped" else ["sm90"],
        "protects": f"what {gate_id} protects",
        "status": status,
        "reason": reason,
        "duration_s": 1.5,
        "checks": checks,
        "measurements": measurements if status in ("passed", "failed") else {},
        "tables": tables or [],
        "inputs": [],
        "parameters": parameters or {},
        "notes": [],
    }


def _payload() -> list[dict[str, Any]]:
    per_token = {"K16/V16": 4096, "K16/V8": 3072, "K8/V16": 3072, "K8/V8": 2048}
    return [
        {
            "layout": layout,
            "bytes_per_token": b,
            "context_bytes": b * 2048,
            "cartridge_bytes": b * 2048 + 512,
            "capacity_ratio": 4096 / b,
        }
        for layout, b in per_token.items()
    ]


def loss_items() -> list[dict[str, Any]]:
    def layouts(scale: float) -> list[dict[str, Any]]:
        rel = {"K16/V16": 0.0, "K16/V8": 0.004 * scale, "K8/V16": 0.011 * scale, "K8/V8": 0.016 * scale}
        return [
            {
                "layout": layout,
                "loss": 2.1 * (1 + rel[layout]),
                "rel_increase": rel[layout],
                "ci_low": rel[layout] - 0.002,
                "ci_high": rel[layout] + 0.002,
                "kl_mean": rel[layout] / 3,
                "top1_agreement": 1 - rel[layout],
                "saturated_k": 0,
                "saturated_v": 3,
                "positive_control": layout == "K8/V16",
            }
            for layout in LAYOUTS
        ]

    def measured(checkpoint: str, scale: float) -> dict[str, Any]:
        m = {
            "workload": "codebase-qa",
            "checkpoint": checkpoint,
            "model_id": "SmolLM2-135M",
            "scaling": "none",
            "decide_on": "ci",
            "confidence": 0.95,
            "reference": {"loss": 2.1, "n_items": 64, "n_tokens": 40960},
            "layouts": layouts(scale),
            "payload": _payload(),
            "per_item": {"ids": ["a"], "tokens": [3], "reference_nll": [6.3], "nll": {"K16/V8": [6.31]}},
        }
        return LossIncreaseMeasurements.written(m).model_dump(mode="json")

    payload_table = {
        "title": "Raw payload (bytes)",
        "columns": ["layout", "bytes_per_token"],
        "rows": [[p["layout"], p["bytes_per_token"]] for p in _payload()],
    }
    per_layout = {"title": f"Per-layout loss {HOSTILE}", "columns": ["layout", "loss"], "rows": [["K16/V8", 2.1084]]}
    passing = [
        check("K16/V8 rel. loss increase", 0.004, "<=", 0.01, "pass", decided_on=0.006, ci_low=0.002, ci_high=0.006)
    ]
    control = [check("K8/V16 positive control", 0.011, ">=", 0.005, "pass")]
    return [
        item(
            "loss[early]",
            "loss",
            "loss_increase",
            "passed",
            passing + control,
            measured("step-400", 1.0),
            tables=[payload_table, per_layout],
        ),
        item(
            "loss[final]",
            "loss",
            "loss_increase",
            "failed",
            [check("K16/V8 rel. loss increase", 0.012, "<=", 0.01, "fail", decided_on=0.014), *control],
            measured(f"final {HOSTILE}", 3.0),
            reason="failed checks: K16/V8 rel. loss increase",
            tables=[payload_table],
        ),
        item("loss[gpu-only]", "loss", "loss_increase", "skipped", [], {}, reason="requires sm90: no GPU"),
    ]


def accuracy_items() -> list[dict[str, Any]]:
    def measured(task: str, ratio: float, decision: str, underpowered: bool) -> dict[str, Any]:
        m = {
            "task": task,
            "task_id": task,
            "metric": "acc",
            "layout": "K16/V8",
            "reference_layout": "K16/V16",
            "backend": "hf",
            "scaling": "none",
            "model": {"source": "path", "path": "/models/x"},
            "sample_seed": 0,
            "num_fewshot": None,
            "n": 2000,
            "reference_score": 0.70,
            "score": 0.70 * ratio,
            "delta_points": 70 * (ratio - 1),
            "ratio": ratio,
            "ratio_defined": True,
            "ratio_ci_low": ratio - 0.004,
            "ratio_ci_high": ratio + 0.003,
            "ratio_ci_confidence": 0.95,
            "n_resamples": 2000,
            "decision": decision,
            "decided_on": ratio - 0.004,
            "mcnemar_p": 0.4,
            "discordant": {"ref_only": 5, "cand_only": 3},
            "paired_table": {"both": 1390, "ref_only": 5, "cand_only": 3, "neither": 602},
            "discordance_rate": 0.004,
            "power": {
                "alpha": 0.05,
                "beta": 0.2,
                "assumed_discordance": 0.004,
                "discordance_assumed": "declared",
                "min_resolvable_drop": 0.01,
            },
            "min_resolvable_drop": 0.01,
            "floors": [{"check": "ratio", "allowed_drop": 0.007, "underpowered": underpowered, "power_statement": "-"}],
            "underpowered": underpowered,
            "smoke": False,
            "scores": {"K16/V16": 0.70, "K16/V8": 0.70 * ratio},
            "wall_s": {"K16/V16": 1.0, "K16/V8": 1.0},
        }
        return AccuracyFloorMeasurements.written(m).model_dump(mode="json")

    return [
        item(
            "acc[arc]",
            "acc",
            "accuracy_floor",
            "passed",
            [check("ratio", 0.9985, ">=", 0.99, "pass")],
            measured("arc_easy", 0.9985, "ci_lower", False),
        ),
        item(
            "acc[hella]",
            "acc",
            "accuracy_floor",
            "failed",
            [check("ratio", 0.9931, ">=", 0.99, "inconclusive")],
            measured("hellaswag", 0.9931, "ci_lower", True),
            reason="inconclusive",
        ),
        item(
            "acc[piqa]",
            "acc",
            "accuracy_floor",
            "failed",
            [check("ratio", 0.975, ">=", 0.99, "fail")],
            measured("piqa", 0.975, "ci_lower", False),
            reason="failed checks: ratio",
        ),
        item("acc[mmlu]", "acc", "accuracy_floor", "skipped", [], {}, reason="requires vllm"),
    ]


def numerics_items() -> list[dict[str, Any]]:
    out = []
    for phase in ("prefill", "decode"):
        for live_v in (True, False):
            for cartridge_len in (512, 2048):
                for batch in (1, 8):
                    name = f"num[{phase}-{live_v}-{cartridge_len}-{batch}]"
                    params = {
                        "phase": phase,
                        "live_v": "fp8_e4m3" if live_v else "bf16",
                        "page_size": 16,
                        "cartridge_len": cartridge_len,
                        "head_dim": 128,
                        "batch": f"b{batch}",
                    }
                    if phase == "decode" and batch == 8 and cartridge_len == 2048:
                        out.append(
                            item(
                                name,
                                "numerics",
                                "kernel_numerics",
                                "skipped",
                                [],
                                {},
                                reason="requires sm90",
                                parameters=params,
                            )
                        )
                        continue
                    bad = phase == "prefill" and not live_v and cartridge_len == 2048 and batch == 1
                    rel_l2 = 0.02 if bad else 0.001
                    m = KernelNumericsMeasurements.written(
                        {
                            **params,
                            "check": "kernel",
                            "cartridge_v": "fp8_e4m3",
                            "sink": False,
                            "q_lens": None,
                            "live_lens": [16] * batch,
                            "kv_layout": "separate",
                            "seeds": [1],
                            "max_abs_err": rel_l2 * 3,
                            "max_rel_err": rel_l2 * 5,
                            "rel_l2": rel_l2,
                            "contract": cartridge_len == 512,
                        }
                    ).model_dump(mode="json")
                    status, outcome = ("failed", "fail") if bad else ("passed", "pass")
                    out.append(
                        item(
                            name,
                            "numerics",
                            "kernel_numerics",
                            status,
                            [check("relative L2 error", rel_l2, "<=", 0.005, outcome)],
                            m,
                            parameters={**params, "rtol": 0.01, "atol": 0.01},
                        )
                    )
    return out


def perf_items() -> list[dict[str, Any]]:
    def measured(metric: str, batch: int, ratio: float, outcome: str) -> dict[str, Any]:
        per_side = {"candidate": None, "baseline": None}
        m = {
            "metric": metric,
            "batch": batch,
            "suffix": 128,
            "candidate": "fused-k16v8",
            "baseline": "flashinfer-inject-bf16",
            "ratio": ratio,
            "ci_low": ratio - 0.03,
            "ci_high": ratio + 0.03,
            "confidence": 0.95,
            "direction": "higher_is_better",
            "decision": outcome,
            "outcome": outcome,
            "ci_method": "process-t",
            "ci_method_requested": "process-t",
            "ci_df": 3.0,
            "ci_fallback": None,
            "ci_description": "process-level Welch t interval",
            "processes": {"candidate": 3, "baseline": 3},
            "candidate_samples": [1000 * ratio] * 3,
            "baseline_samples": [1000.0] * 3,
            "candidate_process_samples": [[1000 * ratio]] * 3,
            "baseline_process_samples": [[1000.0]] * 3,
            "candidate_median": 1000 * ratio,
            "baseline_median": 1000.0,
            "unit": "tok/s",
            "bytes_moved": per_side,
            "pct_peak_bw": per_side,
            "clocks": per_side,
            "timing_method": per_side,
            "ncu": None,
            "implementation_set": "kernel",
            "candidate_options": {},
            "shape": {},
            "live": 144,
            "gpu": None,
            "versions": None,
            "kernel_identity": None,
            "peak_bandwidth_tbps": None,
            "baseline_source": "measured in this run",
            "candidate_worker_wall_s": [1.0, 1.0, 1.0],
        }
        return PerfNonRegressionMeasurements.written(m).model_dump(mode="json")

    out = []
    for batch, ratio, outcome in ((1, 1.02, "pass"), (8, 0.97, "inconclusive"), (32, 0.90, "fail")):
        status = "passed" if outcome == "pass" else "failed"
        out.append(
            item(
                f"perf[decode-{batch}]",
                "perf",
                "perf_nonregression",
                status,
                [check("ratio", ratio, ">=", 0.95, outcome)],
                measured("decode_tok_s", batch, ratio, outcome),
            )
        )
    out.append(
        item(
            "perf[decode-64]",
            "perf",
            "perf_nonregression",
            "skipped",
            [],
            {},
            reason="requires sm90",
            parameters={"batch": 64},
        )
    )
    return out


def synthetic_items() -> list[dict[str, Any]]:
    return loss_items() + accuracy_items() + numerics_items() + perf_items()


def with_items(report: dict[str, Any], extra: list[dict[str, Any]]) -> dict[str, Any]:
    """`report` with `extra` appended and its counts and verdict recomputed as the plugin would."""
    items = [*report["items"], *extra]
    statuses = [Status(i["status"]) for i in items]
    counts = {s.value: sum(x is s for x in statuses) for s in Status}
    return {**report, "items": items, "counts": {**counts, "total": len(items)}, "verdict": verdict(statuses).value}
