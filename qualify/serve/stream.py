"""A request stream served by one engine: closed-loop clients or Poisson arrivals, with per-token timing.

The engine-level batches (`engine.run_batch`) send a whole batch at once and wait for it; serving is a stream of
requests that arrive, queue for KV memory, and finish at different times. `serve_stream` drives an engine
through vLLM's ``LLMEngine`` interface (``add_request``, ``step``, ``has_unfinished_requests``; duck-typed, so
the CPU tests drive a fake one) for a fixed number of requests:

* closed loop: `clients` clients, each sending its next request when its last one finished;
* Poisson: requests arrive at `rate_per_s` (seeded exponential gaps); at most `clients` are in the engine at
  once, later arrivals wait in the client queue, and their TTFT counts from arrival.

Each request records when it arrived and when each of its output tokens came back (the time of the step that
returned it). Given a probe of the engine's scheduler, each step also records how many requests the scheduler ran
(sent requests beyond those wait in its queue for KV memory): the admitted concurrency as measured, not as computed.
`stream_metrics` turns a run into completed requests/s, output tokens/s, TTFT and ITL (the gap between consecutive
tokens of a request) percentiles, the most requests that were in the engine at once, the scheduler's peak and mean
of running requests, and the longest engine step (a stall: a compile on first use, a collection). The engine's own
scheduler admits what its KV memory holds, so with equal KV memory the layouts with fewer bytes per request run more
requests at once; that is the comparison.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StreamSpec:
    requests: int  # completed requests the stream serves
    clients: int  # most requests in the engine at once (closed loop: the clients)
    rate_per_s: float | None = None  # Poisson arrivals; None: closed loop
    seed: int = 0

    def __post_init__(self) -> None:
        if self.requests < 1 or self.clients < 1:
            raise ValueError(f"a stream needs requests and clients >= 1, got {self.requests} and {self.clients}")
        if self.rate_per_s is not None and not self.rate_per_s > 0:
            raise ValueError(f"a Poisson stream needs a positive rate, got {self.rate_per_s}")

    @property
    def label(self) -> str:
        how = f"Poisson arrivals at {self.rate_per_s:g} req/s" if self.rate_per_s else "closed loop"
        return f"{self.requests} requests, {how}, at most {self.clients} in the engine"


@dataclass
class RequestTrace:
    request_id: str
    arrival_s: float
    sent_s: float
    token_s: list[float] = field(default_factory=list)
    finished_s: float | None = None


def _arrivals(spec: StreamSpec) -> list[float]:
    """Arrival offsets from the stream's start: all at 0 for a closed loop (clients send as they free up)."""
    if spec.rate_per_s is None:
        return [0.0] * spec.requests
    rng = random.Random(spec.seed)
    t, out = 0.0, []
    for _ in range(spec.requests):
        t += rng.expovariate(spec.rate_per_s)
        out.append(t)
    return out


@dataclass(frozen=True)
class StreamRun:
    traces: list[RequestTrace]
    wall_s: float
    running: list[int]  # requests the scheduler ran, after each step (empty without a probe)
    longest_step_s: float = 0.0  # the longest engine step: a stall (a compile, a collection) shows here
    longest_step_at_s: float = 0.0  # when it began, from the stream's start


def serve_stream(
    engine: Any,
    prompts: Iterator[Any],
    params: Any,
    spec: StreamSpec,
    *,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    request_prefix: str = "stream",
    running: Callable[[], int] | None = None,
) -> StreamRun:
    """Serve `spec.requests` requests (prompts drawn from `prompts` as they are sent). `running`, if given, reads
    how many requests the engine's scheduler runs; it is read after every step, outside the step's own time."""
    arrivals = _arrivals(spec)
    start = clock()
    pending = list(range(spec.requests))  # in arrival order
    traces: dict[str, RequestTrace] = {}
    in_engine: set[str] = set()
    scheduled: list[int] = []
    longest = (0.0, 0.0)
    done = 0
    while done < spec.requests:
        now = clock() - start
        while pending and len(in_engine) < spec.clients and arrivals[pending[0]] <= now:
            i = pending.pop(0)
            rid = f"{request_prefix}-{i}"
            traces[rid] = RequestTrace(rid, arrival_s=arrivals[i], sent_s=now)
            engine.add_request(rid, next(prompts), params)
            in_engine.add(rid)
        if not in_engine:
            # Nothing to run until the next arrival (Poisson streams only).
            sleep(max(0.0, arrivals[pending[0]] - (clock() - start)))
            continue
        began = clock() - start
        outputs = engine.step()
        t = clock() - start
        if t - began > longest[0]:
            longest = (t - began, began)
        if running is not None:
            scheduled.append(running())
        for out in outputs:
            trace = traces.get(out.request_id)
            if trace is None:
                # Waiting for a request the engine names otherwise would never end: fail instead.
                raise RuntimeError(f"the engine returned output for request {out.request_id!r}, not one it was sent")
            new = len(out.outputs[0].token_ids) - len(trace.token_s)
            trace.token_s.extend([t] * max(0, new))
            if out.finished:
                trace.finished_s = t
                in_engine.discard(out.request_id)
                done += 1
    return StreamRun(list(traces.values()), clock() - start, scheduled, *longest)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def stream_metrics(run: StreamRun) -> dict[str, float]:
    """Completed requests/s and output tokens/s over the stream's wall time; TTFT (first token - arrival) and
    ITL (consecutive tokens of one request, pooled over requests) percentiles in ms; the peak of requests
    in the engine at once; the peak and the per-step mean of requests the scheduler ran (NaN without a probe); the
    longest engine step and when it began."""
    traces, wall_s = run.traces, run.wall_s
    finished = [t for t in traces if t.finished_s is not None]
    ttft = [(t.token_s[0] - t.arrival_s) * 1e3 for t in finished if t.token_s]
    itl = [(b - a) * 1e3 for t in finished for a, b in zip(t.token_s, t.token_s[1:], strict=False)]
    events = sorted([(t.sent_s, 1) for t in traces] + [(t.finished_s, -1) for t in finished])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return {
        "completed_requests_per_s": len(finished) / wall_s,
        "stream_output_tokens_per_s": sum(len(t.token_s) for t in finished) / wall_s,
        "stream_ttft_p50_ms": _pct(ttft, 50),
        "stream_ttft_p95_ms": _pct(ttft, 95),
        "itl_p50_ms": _pct(itl, 50),
        "itl_p95_ms": _pct(itl, 95),
        "peak_in_engine": float(peak),
        "scheduler_running_peak": float(max(run.running)) if run.running else float("nan"),
        "scheduler_running_mean": float(np.mean(run.running)) if run.running else float("nan"),
        "longest_step_ms": run.longest_step_s * 1e3,
        "longest_step_at_s": run.longest_step_at_s,
    }
