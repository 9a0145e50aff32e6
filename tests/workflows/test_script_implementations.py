"""The host scripts name kernel implementations to bench_attention.py by hand: every name written out after an
`--implementations` flag (or in an `impls=` list) must be one the kernel set registers, and a name that says which
prefill it times must time that one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qualify.perf.implementations import KERNEL_SET

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))
# The literal names after the flag, across a line continuation; `$var` and `"$@"` are the caller's.
_FLAG = re.compile(r"--implementations((?:\s+(?:\\\n\s*)?[a-z0-9][a-z0-9-]*)+)")
_LIST = re.compile(r"\bimpls=\"([a-z0-9 -]+)\"")


def named_implementations(text: str) -> list[str]:
    names: list[str] = []
    for m in _FLAG.finditer(text):
        names += [n for n in m.group(1).replace("\\\n", " ").split() if not n.startswith("-")]
    for m in _LIST.finditer(text):
        names += m.group(1).split()
    return names


def test_the_parser_reads_continued_flags_and_lists() -> None:
    text = 'x --implementations a-b c \\\n      d --repetitions 2\nimpls="e f"\ny --implementations "$@" --x\n'
    assert named_implementations(text) == ["a-b", "c", "d", "e", "f"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_named_implementation_is_registered(script: Path) -> None:
    unknown = sorted(set(named_implementations(script.read_text())) - set(KERNEL_SET.names()))
    assert not unknown, f"{script.name} names implementations the kernel set lacks: {unknown}"


def test_the_steps_that_log_a_triton_prefill_time_it() -> None:
    # `fused-k16v8` is the dispatch's prefill, the Gluon one on SM90: a step whose log line promises the Triton
    # prefill must name `fused-k16v8-triton` (gluon-bench and gluon-profile timed the Gluon tile twice until
    # results/2026-12-07-exp2-ab-hnd-h100 found it).
    text = (ROOT / "scripts" / "gpu_speed.sh").read_text()
    for step in ("gluon-bench)", "gluon-profile)"):
        body = text[text.index(step) :].split(";;", 1)[0]
        assert "Triton" in body, step
        assert "fused-k16v8-triton" in named_implementations(body), step
