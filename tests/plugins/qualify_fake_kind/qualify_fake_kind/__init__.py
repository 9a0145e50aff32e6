"""Gate kind `compare`: a value must stay within a limit. Test-only; the worked example of a plug-in kind.

The whole kind: fields (`CompareParams`) with a lint rule (`lint`), typed measurements (`CompareMeasurements`),
a runner (`run`), a render hook (`qualify_fake_kind.render:RENDER`, imported only when a page is drawn) and the
spec that names them.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Literal

from pydantic import Field

from qualify.compile import GateItem
from qualify.context import RunContext
from qualify.hashing import sha256_file
from qualify.registry import GateKindSpec, LintIssue
from qualify.results import Check, InputRef, ItemOutcome
from qualify.schema.models import KindParams, MeasurementModel


class CompareParams(KindParams):
    threshold_fields: ClassVar[dict[str, Any]] = {"limit": True}  # the limit is recorded once, as the check's threshold

    value: float
    limit: float
    mode: Literal["upper", "lower"] = "upper"
    file: str | None = None
    # Stand-ins for a numerics item (qualifies) and a perf item (dispatches) in specialization-coverage tests.
    qualifies: list[str] = Field(default_factory=list)
    dispatches: list[str] = Field(default_factory=list)
    # For `qualify run --gpus` tests: items naming one group share a worker; `note_gpu` notes the worker's GPU.
    group: str | None = None
    note_gpu: bool = False
    crash_process: bool = False  # ends the process mid-item, as a segfaulting kernel would
    # A marker file (relative to the gate file): the first run that finds it missing writes it and fails as a CUDA
    # allocation on a crowded GPU does; later runs measure as usual.
    out_of_memory_once: str | None = None


class CompareMeasurements(MeasurementModel):
    value: float


def lint(params: KindParams, gate_file: object) -> list[LintIssue]:
    """Rules the field types cannot say: `file` names a file to hash, so a folder there is a mistake."""
    assert isinstance(params, CompareParams)
    resolve = getattr(gate_file, "resolve", None)
    if params.file and resolve is not None and resolve(params.file).is_dir():
        return [LintIssue(("file",), f"{params.file!r} is a folder, not a file (paths are relative to the gate file)")]
    return []


def run(item: GateItem, ctx: RunContext) -> ItemOutcome:
    p = item.params
    assert isinstance(p, CompareParams)
    if p.crash_process:
        os._exit(3)
    if p.out_of_memory_once:
        marker = item.gate_file.resolve(p.out_of_memory_once)
        if not marker.exists():
            marker.write_text("ran out of memory once\n")
            raise RuntimeError("CUDA out of memory. Tried to allocate 704.00 MiB (a stand-in, once)")
    op = "<=" if p.mode == "upper" else ">="
    outcome = ItemOutcome(
        checks=[Check(name="value", observed=p.value, operator=op, threshold=p.limit, statistic="exact", n=1)],
        measurements=CompareMeasurements(value=p.value),
        parameters=p.report_parameters(),
        qualifies=list(p.qualifies),
        dispatches=list(p.dispatches),
    )
    if p.note_gpu:
        outcome.notes.append(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}")
    if p.file:
        path = item.gate_file.resolve(p.file)
        outcome.inputs.append(InputRef(name=path.name, path=str(path), sha256=sha256_file(path), role="test-input"))
    return outcome


def worker_group(params: KindParams) -> str | None:
    assert isinstance(params, CompareParams)
    return params.group


SPEC = GateKindSpec(
    name="compare",
    params=CompareParams,
    measurements=CompareMeasurements,
    runner=f"{__name__}:run",
    protects="a test value stays within its limit",
    lint=lint,
    render=f"{__name__}.render:RENDER",
    worker_group=worker_group,
    shares_gpu=True,  # nothing is timed and no GPU is touched: `--workers-per-gpu` tests spread it
)
