"""The metrics the perf gate compares, with the direction in which each is better."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from qualify.stats.ratio import Direction

MetricName = Literal["decode_tokens_per_s", "ttft_proxy_ms", "output_tokens_per_s", "ttft_p50_ms", "ttft_p95_ms"]


@dataclass(frozen=True)
class Metric:
    name: MetricName
    unit: str
    direction: Direction
    phase: Literal["decode", "prefill", "engine"]
    description: str

    @property
    def operator(self) -> str:
        return ">=" if self.direction is Direction.HIGHER_IS_BETTER else "<="


METRICS: dict[str, Metric] = {
    "decode_tokens_per_s": Metric(
        name="decode_tokens_per_s",
        unit="tok/s",
        direction=Direction.HIGHER_IS_BETTER,
        phase="decode",
        description=(
            "attention-only output tokens/s = batch / (one decode step = num_layers attention calls), at the "
            "live length of the middle generated token; MLP, sampling and KV append are not included"
        ),
    ),
    "ttft_proxy_ms": Metric(
        name="ttft_proxy_ms",
        unit="ms",
        direction=Direction.LOWER_IS_BETTER,
        phase="prefill",
        description=(
            "TTFT proxy = copying the cartridge into the new requests' pages (num_layers layers; zero for a "
            "shared cartridge) + prefill attention over the suffix for num_layers layers"
        ),
    ),
    "output_tokens_per_s": Metric(
        name="output_tokens_per_s",
        unit="tok/s",
        direction=Direction.HIGHER_IS_BETTER,
        phase="engine",
        description=(
            "engine level: output tokens of a whole batch (sent at once, fixed generated length, ignore_eos) / the "
            "batch's wall time in vLLM, prefill included"
        ),
    ),
    "ttft_p50_ms": Metric(
        name="ttft_p50_ms",
        unit="ms",
        direction=Direction.LOWER_IS_BETTER,
        phase="engine",
        description="engine level: median over the batch's requests of vLLM's time to first token (from arrival)",
    ),
    "ttft_p95_ms": Metric(
        name="ttft_p95_ms",
        unit="ms",
        direction=Direction.LOWER_IS_BETTER,
        phase="engine",
        description="engine level: 95th percentile over the batch's requests of vLLM's time to first token",
    ),
}


def metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown perf metric {name!r}; known: {', '.join(sorted(METRICS))}") from None
