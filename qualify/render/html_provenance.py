"""The provenance section: where, when and with what the run happened, and what it qualified."""

from __future__ import annotations

from typing import Any

from qualify.render.fmt import as_dict, as_list, as_text, number
from qualify.render.html_parts import code, esc, kv_table, table
from qualify.render.source import RenderInput


def _git(prov: dict[str, Any]) -> str:
    git = as_dict(prov.get("git"))
    dirty = git.get("dirty")
    state = "clean" if dirty is False else "DIRTY (uncommitted changes)" if dirty is True else "unknown"
    return f"{code(git.get('commit', 'unknown'))} — {esc(state)}"


def _gpus(prov: dict[str, Any]) -> str:
    cuda = as_dict(prov.get("cuda"))
    parts = []
    devices = [d for d in as_list(cuda.get("devices")) if isinstance(d, dict)]
    if devices:
        rows = [
            [
                esc(d.get("index")),
                esc(d.get("name")),
                esc(d.get("compute_capability")),
                esc(number(d.get("total_memory_bytes"))),
            ]
            for d in devices
        ]
        parts.append(table(["CUDA index", "name", "compute capability", "memory (bytes)"], rows, numeric=(3,)))
    else:
        reason = as_text(cuda.get("error")) or "CUDA not available"
        parts.append(f"<p>No CUDA device ({esc(reason)}); CUDA build {esc(cuda.get('cuda_version') or '–')}.</p>")
    smi = prov.get("nvidia_smi")
    if isinstance(smi, dict):
        gpus = [g for g in as_list(smi.get("gpus")) if isinstance(g, dict)]
        if gpus:
            keys = ["name", "driver_version", "memory_total", "clocks_sm", "clocks_mem", "clocks_max_sm"]
            parts.append(table(["nvidia-smi: " + keys[0], *keys[1:]], [[esc(g.get(k)) for k in keys] for g in gpus]))
        if smi.get("error"):
            parts.append(f"<p>nvidia-smi: {esc(smi.get('error'))}</p>")
    return "".join(parts)


def _absent(key: str) -> str:
    # A null commit (provenance's "<package>-commit") means its build did not say, not that nothing is installed.
    return "unknown" if key.endswith("-commit") else "not installed"


def provenance_section(src: RenderInput) -> str:
    report = src.report
    prov = as_dict(report.get("provenance"))
    release = as_dict(report.get("release"))
    cpu = as_dict(prov.get("cpu"))
    is_release = release.get("is_release") is True
    pairs = [
        ("release", f"<strong>{'RELEASE' if is_release else 'not a release'}</strong> — {esc(release.get('reason'))}"),
        ("strict run", esc(report.get("strict"))),
        ("git commit", _git(prov)),
        (
            "tool",
            esc(f"{as_dict(report.get('tool')).get('name', '')} {as_dict(report.get('tool')).get('version', '')}"),
        ),
        ("python", esc(prov.get("python"))),
        ("OS", esc(prov.get("os"))),
        ("host", esc(prov.get("hostname"))),
        ("CPU", esc(f"{as_text(cpu.get('model'))} ({as_text(cpu.get('usable_cores'))} usable cores)")),
        ("started", esc(prov.get("started_at"))),
        ("finished", esc(prov.get("finished_at"))),
        ("duration", esc(f"{number(prov.get('duration_s'))} s")),
        ("seed", esc(report.get("seed"))),
        ("command line", code(" ".join(as_text(a) for a in as_list(prov.get("command_line"))))),
        ("rendered from", f"{esc(src.source)} (sha256 {code(src.source_sha256)})"),
    ]
    versions = as_dict(prov.get("versions"))
    env = as_dict(prov.get("environment"))
    inputs = [i for i in as_list(report.get("inputs")) if isinstance(i, dict)]
    gate_files = [g for g in as_list(report.get("gate_files")) if isinstance(g, dict)]
    parts = [
        "<section id='provenance'><h2>Provenance</h2>",
        kv_table(pairs),
        "<h3>GPUs</h3>",
        _gpus(prov),
        "<h3>Package versions</h3>",
        table(
            ["package", "version"],
            [[esc(k), esc(v if v is not None else _absent(k))] for k, v in versions.items()],
        ),
        "<h3>Inputs</h3>",
        table(
            ["role", "name", "path", "sha256"],
            [[esc(i.get("role")), esc(i.get("name")), code(i.get("path")), code(i.get("sha256"))] for i in inputs],
        ),
        "<h3>Gate files</h3>",
        table(
            ["path", "suite", "version", "items", "sha256"],
            [
                [
                    code(g.get("path")),
                    esc(g.get("suite")),
                    esc(g.get("version")),
                    esc(g.get("items")),
                    code(g.get("sha256")),
                ]
                for g in gate_files
            ],
        ),
    ]
    if src.subjects:
        parts += [
            "<h3>Signed subjects</h3>",
            table(["name", "sha256"], [[esc(s.name), code(s.sha256)] for s in src.subjects]),
        ]
    parts += [
        "<h3>Environment</h3>",
        table(["variable", "value"], [[code(k), code(v)] for k, v in env.items()]) if env else "<p>none recorded</p>",
        "</section>",
    ]
    return "".join(parts)
