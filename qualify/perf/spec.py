"""What the gate asks a worker to measure, and what the worker answers (JSON across a process boundary).

No torch here: the gate kind's fields reuse these models, and linting must not import a GPU stack.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from qualify.perf.metrics import MetricName
from qualify.schema.models import StrictModel
from qualify.serve.settings import EngineSettings


class ServingStream(StrictModel):
    """One request stream of a serving shape: `requests` completed requests, closed loop (every client sends its
    next request when its last one finished) or Poisson arrivals at `arrival_rate_per_s`."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    requests: int = Field(ge=1)
    arrival_rate_per_s: float | None = Field(default=None, gt=0)


class ShapeSet(StrictModel):
    """One model's attention shape with the batches and suffixes one worker process measures together.

    `suffixes` are the live (per-request) prompt tokens after the cartridge: TTFT prefills them; decode
    runs at `suffix + generated_tokens // 2` live tokens (the middle of the generated tokens).
    """

    id: str
    model: str = "Qwen3-8B"
    num_layers: int = Field(default=36, ge=1)
    num_qo_heads: int = Field(default=32, ge=1)
    num_kv_heads: int = Field(default=8, ge=1)
    head_dim: int = Field(default=128, ge=16)
    page_size: int = Field(default=8, ge=1)
    cartridge_len: int = Field(default=632, ge=1)
    batches: list[int] = Field(min_length=1)
    suffixes: list[int] = Field(min_length=1)
    generated_tokens: int = Field(default=32, ge=1)
    # Engine-level sets only (qualify.perf.engine_set): how the serving engine is built; `suffixes` are then
    # the question tokens each prompt carries after the cartridge.
    engine: EngineSettings | None = None
    # The serving set only (qualify.perf.serving_set): `batches` are then the clients (most requests in the
    # engine at once) of a stream of `stream_requests` requests, closed loop, or Poisson at `arrival_rate_per_s`;
    # or, with `streams`, of each named stream in turn from one engine (an item picks one with `stream`), so that
    # one engine start serves every kind of stream a comparison needs.
    stream_requests: int | None = Field(default=None, ge=1)
    arrival_rate_per_s: float | None = Field(default=None, gt=0)
    streams: list[ServingStream] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _positive(self) -> ShapeSet:
        if any(b < 1 for b in self.batches) or any(s < 1 for s in self.suffixes):
            raise ValueError("batches and suffixes must be positive")
        if len(set(self.batches)) != len(self.batches) or len(set(self.suffixes)) != len(self.suffixes):
            raise ValueError("batches and suffixes must not repeat")
        if self.streams is not None:
            if self.stream_requests is not None or self.arrival_rate_per_s is not None:
                raise ValueError("streams replaces stream_requests and arrival_rate_per_s: give one or the other")
            ids = [st.id for st in self.streams]
            if len(set(ids)) != len(ids):
                raise ValueError(f"stream ids must not repeat: {ids}")
        return self

    def serving_streams(self) -> list[ServingStream | None]:
        """The streams a serving worker serves: the named ones, else the one stream of `stream_requests` (None:
        its cells carry no stream id)."""
        return list(self.streams) if self.streams else [None]

    def decode_live(self, suffix: int) -> int:
        return suffix + self.generated_tokens // 2


class Timing(StrictModel):
    """How each cell is timed. `l2_cold` gives every layer its own buffers so a layer's data is not in L2.

    Every implementation is measured in `processes` fresh worker processes, each doing `warmups` untimed and
    `repetitions` timed steps. The CI treats the process as the unit, because two processes of the same
    implementation differ by more than the repetitions inside one (clocks, placement, allocator state).
    `ci_method` picks how (`qualify.stats.ratio`): `process-t` (the default), a Welch t interval on the log
    medians of the processes, whose t quantile corrects for there being only a few; or `two-level-bootstrap`,
    processes then repetitions resampled, whose percentile CI is too narrow with few processes (about 88 %
    coverage for a nominal 95 % with 3). Use 3 or more processes for a release gate (with 2 the t interval is
    honest but wide, df about 1-2). `processes: 1` is allowed where a process is too expensive to repeat (an
    engine start takes minutes): the CI is then the flat bootstrap over one process's repetitions, which
    misses the process-to-process variation, and each check's statistic says so (as it says when process-t
    falls back to a bootstrap for any other reason).
    """

    warmups: int = Field(default=2, ge=0, le=100)
    repetitions: int = Field(default=5, ge=2, le=1000)  # timed steps per process
    processes: int = Field(default=3, le=32)
    l2_cold: bool = True
    cuda_graph: bool = True
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    ci_method: Literal["process-t", "two-level-bootstrap"] = "process-t"
    n_resamples: int = Field(default=4000, ge=200)  # bootstrap resamples (two-level, and process-t's fallbacks)
    worker_timeout_s: float = Field(default=600.0, gt=0)  # per worker process

    @field_validator("processes")
    @classmethod
    def _at_least_one_process(cls, value: int) -> int:
        if value < 1:
            raise ValueError(
                f"processes must be at least 1 (3 or more for a CI that includes the process-to-process "
                f"variation between runs), got {value}"
            )
        return value


class ImplementationOptions(StrictModel):
    """Per-implementation knobs. `redundant_launches` > 1 repeats every attention call: real extra GPU work,
    for showing that the gate flags a slowed candidate. Never set it in a release gate."""

    redundant_launches: int = Field(default=1, ge=1, le=8)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkRequest(_Wire):
    """One worker process: one implementation over the whole shape set.

    `process` numbers the fresh processes the runner starts for the same measurement (0 .. processes - 1);
    the measurement itself does not depend on it, but it keeps each process's result apart.
    """

    implementation_set: str
    implementation: str
    measure: str  # "module:function" the worker imports; resolved by the parent from the registry
    options: dict[str, Any] = Field(default_factory=dict)
    metrics: list[MetricName]
    shape: dict[str, Any]
    timing: dict[str, Any]
    seed: int = 0
    process: int = Field(default=0, ge=0)
    profile: bool = False  # one eager call per cell, bracketed for Nsight Compute, no timing

    def shape_set(self) -> ShapeSet:
        return ShapeSet.model_validate(self.shape)

    def timing_config(self) -> Timing:
        return Timing.model_validate(self.timing)

    def implementation_options(self) -> ImplementationOptions:
        return ImplementationOptions.model_validate(self.options)


class Cell(_Wire):
    """One (metric, batch, suffix[, stream]) of one implementation: the per-repetition samples in the metric's
    unit."""

    metric: MetricName
    batch: int
    suffix: int
    stream: str | None = None  # the serving shape's named stream (ShapeSet.streams), else None
    live: int  # live tokens per request the attention ran over
    samples: list[float]
    step_ms: list[float]  # the timed quantity per repetition (decode step or TTFT proxy), in ms
    bytes_moved: int
    pct_peak_bw: float | None = None
    method: str = ""  # "cuda-graph" or "eager (...)"
    detail: dict[str, Any] = Field(default_factory=dict)


class WorkResult(_Wire):
    implementation_set: str
    implementation: str
    options: dict[str, Any]
    process: int = Field(default=0, ge=0)  # the request's process index
    cells: list[Cell]
    gpu: dict[str, Any] = Field(default_factory=dict)
    clocks: dict[str, Any] = Field(default_factory=dict)  # {"before": [...], "after": [...]} from nvidia-smi
    versions: dict[str, Any] = Field(default_factory=dict)
    identity: dict[str, Any] | None = None  # kernel identity of the fused kernel
    peak_bandwidth_tbps: float | None = None
    wall_s: float = 0.0
    notes: list[str] = Field(default_factory=list)

    def cell(self, metric: str, batch: int, suffix: int, stream: str | None = None) -> Cell:
        for c in self.cells:
            if (c.metric, c.batch, c.suffix, c.stream) == (metric, batch, suffix, stream):
                return c

        def name(metric: str, batch: int, suffix: int, stream: str | None) -> str:
            return f"{metric}/b{batch}/s{suffix}" + (f"/{stream}" if stream else "")

        have = ", ".join(name(c.metric, c.batch, c.suffix, c.stream) for c in self.cells) or "none"
        raise KeyError(f"{self.implementation}: no cell {name(metric, batch, suffix, stream)} (measured: {have})")
