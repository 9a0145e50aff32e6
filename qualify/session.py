"""What one gate run learns: the compiled gate files, every item's result, and the options it ran with.

Shared by the pytest plugin (which fills it) and the report writer (which reads it); it knows neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from qualify.compile import CompiledFile
from qualify.context import RunContext
from qualify.coverage import CoverageRow, specialization_coverage, unqualified
from qualify.host import HostCapabilities, detect_host
from qualify.registry import GateKindRegistry
from qualify.results import ItemResult, Verdict, verdict
from qualify.shard_plan import ShardPlan, ShardSpec


@dataclass
class SessionState:
    """Everything one pytest session learns about the gates; lives in `config.stash`, never globally."""

    registry: GateKindRegistry
    started_at: datetime
    argv: list[str]
    out_dir: Path | None
    report_name: str | None
    sign_key: Path | None
    strict: bool
    non_release: bool
    seed: int
    baseline: Path | None
    shard: ShardSpec | None = None
    shard_durations: Path | None = None
    shard_plan: ShardPlan | None = None
    # `qualify run --gpus`: the GPUs of the run (controller and workers), the one this worker is pinned to, the
    # workers' parts of the report (controller), and the report merged from them.
    gpus: list[str] | None = None
    workers_per_gpu: int = 1
    gpu: str | None = None
    worker_parts: dict[str, dict[str, Any]] | None = None
    merged: dict[str, Any] | None = None
    _host: HostCapabilities | None = None
    _context: RunContext | None = None
    compiled: list[CompiledFile] = field(default_factory=list)
    collect_errors: list[str] = field(default_factory=list)
    results: list[ItemResult] = field(default_factory=list)
    finished_at: datetime | None = None
    report_path: Path | None = None
    envelope_path: Path | None = None
    write_error: str | None = None

    @property
    def host(self) -> HostCapabilities:
        if self._host is None:
            self._host = detect_host()
        return self._host

    @property
    def context(self) -> RunContext:
        if self._context is None:
            self._context = RunContext(
                host=self.host, seed=self.seed, out_dir=self.out_dir, baseline=self.baseline, strict=self.strict
            )
        return self._context

    @property
    def coverage(self) -> list[CoverageRow]:
        return specialization_coverage(self.results)

    @property
    def unqualified_specializations(self) -> list[str]:
        if self.merged is not None:
            return list(self.merged["coverage"]["unqualified"])
        return unqualified(self.coverage)

    @property
    def verdict(self) -> Verdict:
        if self.merged is not None:
            return Verdict(self.merged["verdict"])
        if self.collect_errors:
            return Verdict.FAIL
        v = verdict([r.status for r in self.results])
        # Dispatched but never shown correct: the run cannot vouch for what it measured.
        return Verdict.INCOMPLETE if v is Verdict.PASS and self.unqualified_specializations else v
