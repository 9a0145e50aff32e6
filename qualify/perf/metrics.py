"""The metrics the perf gate compares, with the direction in which each is better."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from qualify.stats.ratio import Direction

MetricName = Literal[
    "decode_tokens_per_s",
    "ttft_proxy_ms",
    "output_tokens_per_s",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "completed_requests_per_s",
    "stream_output_tokens_per_s",
    "stream_ttft_p50_ms",
    "stream_ttft_p95_ms",
    "itl_p50_ms",
    "itl_p95_ms",
]


@dataclass(frozen=True)
class Metric:
    name: MetricName
    unit: str
    direction: Direction
    phase: Literal["decode", "prefill", "engine", "serving"]
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
    # A request stream served for a fixed number of requests (qualify.serve.stream, the `serving` set).
    "completed_requests_per_s": Metric(
        name="completed_requests_per_s",
        unit="req/s",
        direction=Direction.HIGHER_IS_BETTER,
        phase="serving",
        description="serving: completed requests / the stream's wall time (equal KV memory for every layout)",
    ),
    "stream_output_tokens_per_s": Metric(
        name="stream_output_tokens_per_s",
        unit="tok/s",
        direction=Direction.HIGHER_IS_BETTER,
        phase="serving",
        description="serving: output tokens of the stream's completed requests / the stream's wall time",
    ),
    "stream_ttft_p50_ms": Metric(
        name="stream_ttft_p50_ms",
        unit="ms",
        direction=Direction.LOWER_IS_BETTER,
        phase="serving",
        description="serving: median over the stream's requests of first token - arrival (client queueing included)",
    ),
    "stream_ttft_p95_ms": Metric(
        name="stream_ttft_p95_ms",
        unit="ms",
        direction=Direction.LOWER_IS_BETTER,
        phase="serving",
        description="serving: 95th percentile over the stream's requests of first token - arrival",
    ),
    "itl_p50_ms": Metric(
        name="itl_p50_ms",
        unit="ms",
        direction=Direction.LOWER_IS_BETTER,
        phase="serving",
        description="serving: median inter-token latency (gap between consecutive tokens of a request, all pooled)",
    ),
    "itl_p95_ms": Metric(
        name="itl_p95_ms",
        unit="ms",
        direction=Direction.LOWER_IS_BETTER,
        phase="serving",
        description="serving: 95th percentile inter-token latency, all requests' gaps pooled",
    ),
}


def metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown perf metric {name!r}; known: {', '.join(sorted(METRICS))}") from None
