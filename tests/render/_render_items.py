"""Synthetic items of the four plotted kinds, shaped like the runners' measurements, for rendering tests."""

from __future__ import annotations

from typing import Any

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
        bound = {"K16/V16": None, "K16/V8": 0.01, "K8/V16": None, "K8/V8": None}
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
                "max_rel_increase": bound[layout],
                "positive_control": layout == "K8/V16",
            }
            for layout in LAYOUTS
        ]

    def measured(checkpoint: str, scale: float) -> dict[str, Any]:
        return {
            "workload": "codebase-qa",
            "checkpoint": checkpoint,
            "model_id": "SmolLM2-135M",
            "scaling": "none",
            "reference": {"loss": 2.1, "n_items": 64, "n_tokens": 40960},
            "layouts": layouts(scale),
            "payload": _payload(),
        }

    payload_table = {
        "title": "Raw payload (bytes)",
        "columns": ["layout", "bytes_per_token"],
        "rows": [[p["layout"], p["bytes_per_token"]] for p in _payload()],
    }
    per_layout = {"title": f"Per-layout loss {HOSTILE}", "columns": ["layout", "loss"], "rows": [["K16/V8", 2.1084]]}
    passing = [check("K16/V8 loss increase", 0.004, "<=", 0.01, "pass", decided_on=0.006, ci_low=0.002, ci_high=0.006)]
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
            [check("K16/V8 loss increase", 0.012, "<=", 0.01, "fail", decided_on=0.014), *control],
            measured(f"final {HOSTILE}", 3.0),
            reason="failed checks: K16/V8 loss increase",
            tables=[payload_table],
        ),
        item("loss[gpu-only]", "loss", "loss_increase", "skipped", [], {}, reason="requires sm90: no GPU"),
    ]


def accuracy_items() -> list[dict[str, Any]]:
    def measured(task: str, ratio: float, decision: str, underpowered: bool) -> dict[str, Any]:
        return {
            "task": task,
            "layout": "K16/V8",
            "reference_score": 0.70,
            "score": 0.70 * ratio,
            "ratio": ratio,
            "ratio_ci_low": ratio - 0.004,
            "ratio_ci_high": ratio + 0.003,
            "floor": 0.99,
            "decision": decision,
            "n": 2000,
            "mcnemar_p": 0.4,
            "min_resolvable_drop": 0.01,
            "underpowered": underpowered,
            "smoke": False,
        }

    return [
        item(
            "acc[arc]",
            "acc",
            "accuracy_floor",
            "passed",
            [check("ratio", 0.9985, ">=", 0.99, "pass")],
            measured("arc_easy", 0.9985, "pass", False),
        ),
        item(
            "acc[hella]",
            "acc",
            "accuracy_floor",
            "failed",
            [check("ratio", 0.9931, ">=", 0.99, "inconclusive")],
            measured("hellaswag", 0.9931, "inconclusive", True),
            reason="inconclusive",
        ),
        item(
            "acc[piqa]",
            "acc",
            "accuracy_floor",
            "failed",
            [check("ratio", 0.975, ">=", 0.99, "fail")],
            measured("piqa", 0.975, "fail", False),
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
                        "live_v": live_v,
                        "page_size": 16,
                        "cartridge_len": cartridge_len,
                        "head_dim": 128,
                        "batch": batch,
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
                    m = {
                        **params,
                        "max_abs_err": rel_l2 * 3,
                        "max_rel_err": rel_l2 * 5,
                        "rel_l2": rel_l2,
                        "tolerance": {"rtol": 0.01, "atol": 0.01, "rel_l2": 0.005},
                        "contract": cartridge_len == 512,
                    }
                    status, outcome = ("failed", "fail") if bad else ("passed", "pass")
                    out.append(
                        item(
                            name,
                            "numerics",
                            "kernel_numerics",
                            status,
                            [check("rel_l2", rel_l2, "<=", 0.005, outcome)],
                            m,
                            parameters=params,
                        )
                    )
    return out


def perf_items() -> list[dict[str, Any]]:
    def measured(metric: str, batch: int, ratio: float, outcome: str) -> dict[str, Any]:
        return {
            "metric": metric,
            "batch": batch,
            "candidate": 1000 * ratio,
            "baseline": 1000.0,
            "ratio": ratio,
            "ci_low": ratio - 0.03,
            "ci_high": ratio + 0.03,
            "threshold": 0.95,
            "direction": "higher_is_better",
            "outcome": outcome,
        }

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
