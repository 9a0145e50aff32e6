"""Items spread over the GPUs of one host by pytest-xdist (`qualify run --gpus auto|N|0,1`).

One xdist worker per GPU, each pinned to its GPU with `CUDA_VISIBLE_DEVICES` before anything in it touches CUDA,
so every item has its GPU to itself. `--workers-per-gpu N` pins N workers to each GPU instead, for gate files whose
every kind says its items may share one (`GateKindSpec.shares_gpu`: correctness checks, nothing timed). xdist's
scope scheduler load-balances the items, except that the items of one worker group (`GateKindSpec.worker_group`:
items sharing a run-wide store or timed worker processes) are one scope, run by one worker. Each worker builds its
part of the report (unsigned, never written) and hands it to the controller in its `workeroutput`; the controller
merges the parts into one report in the gate files' compile order, with the GPU of every item, and signs it as a
serial run would be signed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qualify.errors import QualifyError
from qualify.results import Check, ItemOutcome, ItemResult, Status
from qualify.shards.merge import settle

if TYPE_CHECKING:
    from qualify.compile import GateItem
    from qualify.registry import GateKindRegistry
    from qualify.session import SessionState

WORKER_OUTPUT_KEY = "qualify_report"
_GPU_ID = re.compile(r"^(?:\d{1,3}|(?:GPU|MIG)-[0-9A-Za-z/-]{1,80})$")


class GpuSpecError(QualifyError):
    """`--gpus` names no usable set of GPUs."""


def detect_gpu_count() -> int:
    """How many GPUs `nvidia-smi -L` lists (0 without the tool or a driver). Torch is not imported: the
    controller must not create a CUDA context that its workers' pinning could not take back."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def parse_gpus(
    spec: str, *, environ: Mapping[str, str] | None = None, count_gpus: Callable[[], int] = detect_gpu_count
) -> list[str]:
    """The GPU ids one worker each is pinned to. `auto`: every GPU this process may use (the ids in
    `CUDA_VISIBLE_DEVICES` when it is set, else every GPU `nvidia-smi` lists); `N`: the first N of those; `0,2` (or
    UUIDs): those, which must be among them when `CUDA_VISIBLE_DEVICES` is set (a job's allocation is never
    widened). GpuSpecError names what is wrong."""
    env = os.environ if environ is None else environ
    spec = spec.strip()
    visible_raw = env.get("CUDA_VISIBLE_DEVICES")
    visible = None if visible_raw is None else _ids(visible_raw, "CUDA_VISIBLE_DEVICES", allow_empty=True)
    if spec == "auto" or spec.isdigit():
        usable = visible if visible is not None else [str(i) for i in range(count_gpus())]
        if not usable:
            where = "CUDA_VISIBLE_DEVICES is empty" if visible is not None else "nvidia-smi lists none"
            raise GpuSpecError(f"--gpus {spec}: no GPU to use ({where})")
        if spec == "auto":
            return usable
        count = int(spec)
        if not 1 <= count <= len(usable):
            raise GpuSpecError(f"--gpus {spec}: a count of GPUs is 1 to {len(usable)} (the GPUs this process may use)")
        return usable[:count]
    return parse_gpu_ids(spec, environ=env, option="--gpus")


def parse_gpu_ids(spec: str, *, environ: Mapping[str, str] | None = None, option: str = "--qualify-gpus") -> list[str]:
    """GPU ids, never a count: what `parse_gpus` resolved, as the controller hands it to pytest (`--qualify-gpus`),
    where a lone `0` is GPU 0, not zero GPUs. Each id must be among `CUDA_VISIBLE_DEVICES` when that is set."""
    env = os.environ if environ is None else environ
    visible_raw = env.get("CUDA_VISIBLE_DEVICES")
    visible = None if visible_raw is None else _ids(visible_raw, "CUDA_VISIBLE_DEVICES", allow_empty=True)
    hint = "use auto, a count, or 0,1,..." if option == "--gpus" else "GPU ids: 0,1,... or UUIDs"
    ids = _ids(spec.strip(), f"{option} {spec}", allow_empty=False, hint=hint)
    outside = [i for i in ids if visible is not None and i not in visible]
    if outside:
        raise GpuSpecError(f"{option} {spec}: GPU {outside[0]} is not in CUDA_VISIBLE_DEVICES={visible_raw}")
    return ids


def _ids(text: str, what: str, *, allow_empty: bool, hint: str = "use auto, a count, or 0,1,...") -> list[str]:
    ids = [part.strip() for part in text.split(",")] if text.strip() else []
    if not ids and not allow_empty:
        raise GpuSpecError(f"{what}: names no GPU ({hint})")
    bad = [i for i in ids if not _GPU_ID.match(i)]
    if bad:
        raise GpuSpecError(f"{what}: {bad[0]!r} is not a GPU index or UUID ({hint})")
    twice = [i for i, n in Counter(ids).items() if n > 1]
    if twice:
        raise GpuSpecError(f"{what}: GPU {twice[0]} is named twice (one worker per GPU)")
    return ids


def _worker_index(workerid: str) -> int:
    match = re.fullmatch(r"gw(\d+)", workerid)
    return int(match.group(1)) if match else 1 << 30


def worker_gpu(workerid: str, gpus: list[str], per_gpu: int = 1) -> str:
    """The GPU of xdist worker `gwK`: the (K // per_gpu)-th of `gpus` (a worker xdist started in place of a crashed
    one has none: workers are never restarted, `--max-worker-restart 0`)."""
    if _worker_index(workerid) >= len(gpus) * per_gpu:
        raise GpuSpecError(
            f"xdist worker {workerid!r} has no GPU among {','.join(gpus)}: start {per_gpu} worker(s) per GPU"
        )
    return gpus[_worker_index(workerid) // per_gpu]


def check_shares_gpu(gate_paths: list[Path], registry: GateKindRegistry) -> None:
    """GpuSpecError naming the first gate whose kind may not share a GPU (`GateKindSpec.shares_gpu`), over every
    gate compiled from `gate_paths`, selected or not: `-k` is applied later, by the workers."""
    for path, g in _compiled_items(gate_paths, registry):
        if not registry.get(g.kind).shares_gpu:
            raise GpuSpecError(
                f"{path}: gate {g.gate_id!r} ({g.kind}) needs a GPU to itself, so --workers-per-gpu must be 1 "
                "(its items are timed or take most of the GPU's memory)"
            )


def _compiled_items(gate_paths: list[Path], registry: GateKindRegistry) -> Iterator[tuple[Path, GateItem]]:
    """Every item compiled from the gate files under `gate_paths`, with its file (no torch, no data); a file that
    does not compile is left to the workers, which report its error."""
    from qualify.compile import compile_gate_file, discover_gate_files, looks_like_gate_file

    for path in discover_gate_files(gate_paths):
        if not looks_like_gate_file(path):
            continue
        try:
            compiled = compile_gate_file(path, registry)
        except QualifyError:
            continue
        for g in compiled.items:
            yield path, g


def merge_worker_reports(
    parts: dict[str, dict[str, Any]],
    gpus: list[str],
    *,
    provenance: dict[str, Any],
    release: dict[str, Any],
    strict: bool,
    signed: bool,
    per_gpu: int = 1,
) -> dict[str, Any]:
    """One report from the workers' parts (`{workerid: {"report": ..., "compiled": [...], "exitstatus": ...}}`,
    or `{"error": ...}` for a worker that went down without one); `compiled` holds every compiled item, in
    compile order, as the report would record it had it not run.

    Items come in the compile order every worker saw; each item is taken from the worker that ran it (a
    deselected item, recorded by every worker, once). An item no worker reported ran nowhere: it is an ERROR
    naming the workers that went down, so the verdict cannot be PASS. Workers that disagree on what they
    compiled are not parts of one run (GpuSpecError)."""
    ok = {w: p for w, p in sorted(parts.items()) if isinstance(p.get("report"), dict)}
    down = {w: str(p.get("error") or "no report") for w, p in sorted(parts.items()) if w not in ok}
    if not ok:
        raise GpuSpecError(f"no worker returned a report ({'; '.join(f'{w}: {e}' for w, e in down.items())})")
    first_id, first = next(iter(ok.items()))
    for w, p in ok.items():
        for field in ("gate_files", "seed", "tool", "suites"):
            if p["report"].get(field) != first["report"].get(field):
                raise GpuSpecError(f"worker {w}: {field} differs from worker {first_id}'s: not parts of one run")
        if p.get("compiled") != first.get("compiled"):
            raise GpuSpecError(f"worker {w} compiled other items than worker {first_id}: not parts of one run")
    ran: dict[str, dict[str, Any]] = {}
    recorded: dict[str, dict[str, Any]] = {}
    for p in ok.values():
        for item in p["report"].get("items") or []:
            target = recorded if item.get("status") == Status.DESELECTED.value else ran
            if item["name"] in ran and target is ran:
                raise GpuSpecError(f"item {item['name']} ran in two workers: every item runs exactly once")
            target.setdefault(item["name"], item)
    items = []
    why = "; ".join(f"{w}: {e}" for w, e in down.items()) or "no worker reported it"
    for placeholder in first.get("compiled") or []:
        name = placeholder["name"]
        item = ran.get(name) or recorded.get(name)
        reason = f"no result: the worker that ran or was to run it went down without handing over its results ({why})"
        items.append(item or {**placeholder, "status": Status.ERROR.value, "reason": reason})
    report = dict(first["report"])
    report.update(
        {
            "strict": strict,
            "signed": signed,
            "release": release,
            "items": items,
            "collect_errors": sorted({e for p in ok.values() for e in p["report"].get("collect_errors") or []}),
            "inputs": _inputs(ok),
            "provenance": provenance,
        }
    )
    settle(report)
    workers = []
    for w in sorted(parts, key=_worker_index):
        gpu = gpus[_worker_index(w) // per_gpu] if _worker_index(w) < len(gpus) * per_gpu else "none"
        own = (ok[w]["report"].get("items") or []) if w in ok else []
        ran_here = sum(1 for i in own if i.get("status") != Status.DESELECTED.value)
        workers.append({"worker": w, "gpu": gpu, "items": ran_here, "exitstatus": parts[w].get("exitstatus"),
                        "error": down.get(w)})  # fmt: skip
    report["gpus"] = {"ids": list(gpus), "workers": workers, "workers_per_gpu": per_gpu}
    return report


def _inputs(parts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for p in parts.values():
        for i in p["report"].get("inputs") or []:
            seen.setdefault((i.get("role", ""), i.get("path", ""), i.get("sha256", "")), i)
    return [seen[k] for k in sorted(seen)]


def results_from_report(items: list[dict[str, Any]]) -> list[ItemResult]:
    """The merged report's items as results again, for the console summary (checks kept, measurements not)."""
    fields = ("name", "observed", "operator", "threshold", "statistic", "n", "ci_low", "ci_high", "decided_on", "unit")
    out = []
    for i in items:
        checks = [Check(**{k: c.get(k) for k in fields}, outcome=c.get("outcome")) for c in i.get("checks") or []]
        out.append(
            ItemResult(
                nodeid=i["nodeid"], name=i["name"], gate_id=i["gate_id"], cell_id=i.get("cell"), kind=i["kind"],
                gate_file=i["gate_file"], requires=list(i.get("requires") or []), description=i.get("protects", ""),
                status=Status(i["status"]), reason=i.get("reason"), duration_s=float(i.get("duration_s") or 0.0),
                outcome=ItemOutcome(checks=checks), shared_setup_s=float(i.get("shared_setup_s") or 0.0),
                gpu=i.get("gpu"),
            )
        )  # fmt: skip
    return out


def merged_report(state: SessionState, provenance: dict[str, Any], *, signed: bool) -> dict[str, Any]:
    """The controller's report from its workers' parts (`state.worker_parts`), kept on `state.merged`."""
    from qualify.report.build import release_status

    assert state.worker_parts is not None and state.gpus is not None
    state.merged = merge_worker_reports(
        state.worker_parts, state.gpus, provenance=provenance, release=release_status(state, signed),
        strict=state.strict, signed=signed, per_gpu=state.workers_per_gpu,
    )  # fmt: skip
    return state.merged


def item_groups(gate_paths: list[Path], registry: GateKindRegistry) -> dict[str, str]:
    """`{item name: worker group}` over the gate files under `gate_paths` (the run's arguments), for the items whose
    kind names a group. xdist's controller collects nothing, and a node id names no file for a gate file outside
    the root directory, so the controller compiles the files itself (no torch, no data) and matches by item name.
    Two files' items of one name share a group if either has one: grouping more only runs more in one worker."""
    out: dict[str, str] = {}
    for _, g in _compiled_items(gate_paths, registry):
        group_of = registry.get(g.kind).worker_group
        group = group_of(g.params) if group_of is not None else None
        if group:
            out.setdefault(g.name, group)
    return out


def group_scheduler(config: Any, log: Any, registry: GateKindRegistry) -> Any:
    """xdist's scope scheduling with a scope per item, except one per worker group: load-balanced items, and
    each group's items in one worker. (xdist's own `loadgroup` reads a node id suffix that pytest 9 no longer
    lets it set, so it would not group.)"""
    from xdist.scheduler.loadscope import LoadScopeScheduling

    root = Path(config.invocation_params.dir)
    groups = item_groups([root / a.split("::", 1)[0] for a in config.args], registry)

    class GateGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            group = groups.get(nodeid.split("::", 1)[-1])
            return f"group:{group}" if group else nodeid

    return GateGroupScheduling(config, log)
