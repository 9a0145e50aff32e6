"""The request-stream driver against a fake engine with a fake clock: closed loop and Poisson arrivals, what
each request records, and the metrics. The fake runs at most `capacity` requests per step (its KV memory), one
token each, FIFO, so queueing, TTFT and ITL are known exactly."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from qualify.serve.stream import StreamSpec, serve_stream, stream_metrics


@dataclass
class FakeEngine:
    clock: list[float]
    capacity: int
    tokens: int
    step_s: float = 0.01
    queue: list[str] = field(default_factory=list)
    made: dict[str, int] = field(default_factory=dict)
    prompts: list[object] = field(default_factory=list)

    def add_request(self, request_id: str, prompt: object, params: object) -> None:
        self.queue.append(request_id)
        self.made[request_id] = 0
        self.prompts.append(prompt)

    def step(self) -> list[SimpleNamespace]:
        self.clock[0] += self.step_s
        running, out = self.queue[: self.capacity], []
        for rid in running:
            self.made[rid] += 1
            done = self.made[rid] == self.tokens
            out.append(SimpleNamespace(request_id=rid, finished=done,
                                       outputs=[SimpleNamespace(token_ids=list(range(self.made[rid])))]))  # fmt: skip
        self.queue = [r for r in self.queue if self.made[r] < self.tokens]
        return out


def _serve(engine: FakeEngine, spec: StreamSpec, probe: bool = True):
    def sleep(s: float) -> None:
        engine.clock[0] += s

    prompts = iter(range(10**6))
    running = (lambda: min(len(engine.queue), engine.capacity)) if probe else None
    return serve_stream(engine, prompts, None, spec, clock=lambda: engine.clock[0], sleep=sleep, running=running)


def test_closed_loop_keeps_every_client_busy_and_the_engine_admits_its_capacity(test_seed: int) -> None:
    rng = random.Random(test_seed)
    capacity, clients, tokens = rng.randint(2, 6), rng.randint(7, 12), rng.randint(3, 9)
    engine = FakeEngine([0.0], capacity, tokens)
    requests = clients * 3
    run = _serve(engine, StreamSpec(requests, clients))
    traces, wall = run.traces, run.wall_s
    assert len(traces) == requests and all(t.finished_s is not None for t in traces)
    assert engine.prompts == list(range(requests))  # one fresh prompt per request
    m = stream_metrics(run)
    assert m["peak_in_engine"] == clients  # clients send as soon as they free up; the engine queues the rest
    # The scheduler ran its capacity, never more (read after each step, so the last step's drain counts too).
    assert m["scheduler_running_peak"] == capacity and capacity / 2 < m["scheduler_running_mean"] <= capacity
    unprobed = stream_metrics(_serve(FakeEngine([0.0], capacity, tokens), StreamSpec(requests, clients), probe=False))
    assert unprobed["scheduler_running_peak"] != unprobed["scheduler_running_peak"]  # NaN: not measured
    assert all(len(t.token_s) == tokens for t in traces)
    # Every gap between a request's tokens is one engine step: the fake runs a started request every step.
    assert m["itl_p50_ms"] == pytest.approx(10.0) and m["itl_p95_ms"] == pytest.approx(10.0)
    # The first `capacity` requests start at once: their first token after one step.
    assert min((t.token_s[0] - t.arrival_s) for t in traces) == pytest.approx(0.01)
    # Throughput is the engine's: capacity requests of `tokens` steps at a time.
    assert m["completed_requests_per_s"] == pytest.approx(requests / wall)
    assert m["stream_output_tokens_per_s"] == pytest.approx(requests * tokens / wall)
    assert wall == pytest.approx(0.01 * tokens * -(-requests // capacity), rel=0.35)


def test_more_capacity_serves_the_same_stream_faster(test_seed: int) -> None:
    """The equal-memory argument: a layout that fits more requests at once completes more per second."""
    small = stream_metrics(_serve(FakeEngine([0.0], 4, 8), StreamSpec(64, 32)))
    large = stream_metrics(_serve(FakeEngine([0.0], 16, 8), StreamSpec(64, 32)))
    assert large["completed_requests_per_s"] > 3 * small["completed_requests_per_s"]
    assert large["stream_ttft_p95_ms"] < small["stream_ttft_p95_ms"]


def test_poisson_arrivals_count_ttft_from_arrival_and_wait_when_idle(test_seed: int) -> None:
    spec = StreamSpec(40, 4, rate_per_s=5.0, seed=test_seed)
    engine = FakeEngine([0.0], 2, 5)
    run = _serve(engine, spec)
    traces, wall = run.traces, run.wall_s
    arrivals = [t.arrival_s for t in traces]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0
    assert all(t.sent_s >= t.arrival_s for t in traces)  # never sent before it arrived
    assert all(t.token_s[0] - t.arrival_s >= 0.01 - 1e-9 for t in traces)
    assert wall >= arrivals[-1]  # the stream lasts at least until the last arrival
    # At 5 req/s with 50 ms of work each the engine is mostly idle: the stream's rate is the arrival rate.
    assert stream_metrics(run)["completed_requests_per_s"] == pytest.approx(40 / wall)
    same = [t.arrival_s for t in _serve(FakeEngine([0.0], 2, 5), spec).traces]
    assert same == arrivals  # seeded


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"requests": 0, "clients": 1}, "requests and clients"), ({"requests": 3, "clients": 0}, "requests and clients"),
     ({"requests": 3, "clients": 1, "rate_per_s": 0.0}, "positive rate")],
)  # fmt: skip
def test_bad_streams_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StreamSpec(**kwargs)


def test_an_engine_that_renames_requests_fails_instead_of_hanging() -> None:
    engine = FakeEngine([0.0], 2, 3)
    real_step = engine.step

    def renamed() -> list[SimpleNamespace]:
        out = real_step()
        for o in out:
            o.request_id += "-internal"
        return out

    engine.step = renamed
    with pytest.raises(RuntimeError, match="not one it was sent"):
        _serve(engine, StreamSpec(4, 2))


def test_the_longest_step_shows_a_stall_and_when_it_began(test_seed: int) -> None:
    """A compile on first use or a collection stalls one step; the stream records how long and when."""
    rng = random.Random(test_seed)
    engine = FakeEngine([0.0], 4, 6)
    stalled_step, stall_s = rng.randint(3, 10), rng.uniform(0.5, 3.0)
    real_step, calls = engine.step, [0]

    def step() -> list[SimpleNamespace]:
        calls[0] += 1
        if calls[0] == stalled_step:
            engine.clock[0] += stall_s
        return real_step()

    engine.step = step
    m = stream_metrics(_serve(engine, StreamSpec(16, 8)))
    assert m["longest_step_ms"] == pytest.approx((stall_s + 0.01) * 1e3)
    assert m["longest_step_at_s"] == pytest.approx(0.01 * (stalled_step - 1))
    steady = stream_metrics(_serve(FakeEngine([0.0], 4, 6), StreamSpec(16, 8)))
    assert steady["longest_step_ms"] == pytest.approx(10.0)
