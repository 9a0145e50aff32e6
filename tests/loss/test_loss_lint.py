"""Lint of loss_increase thresholds: every bound is finite and in its domain, reported at its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.cli import main

GATE = """\
suite: s
version: 1
workloads:
  w:
    model: {{source: pypi-gguf}}
    cartridges: {{c: c.pt}}
    eval_set: e.json
gates:
  - id: g
    kind: loss_increase
    workload: w
    checkpoint: c
    max_rel_increase: {{K16/V8: {bound}}}
    positive_control: {{layout: K4/V16, metric: kl_mean, minimum: {minimum}}}
"""


@pytest.mark.parametrize(
    ("bound", "minimum", "where", "message"),
    [
        (".inf", "0.01", "13:24", "max_rel_increase.K16/V8: Input should be a finite number"),
        (".nan", "0.01", "13:24", "max_rel_increase.K16/V8: Input should be a finite number"),
        ("-0.01", "0.01", "13:24", "a maximum increase cannot be negative"),
        ("0.01", ".inf", "14:57", "positive_control.minimum: Input should be a finite number"),
    ],
)
def test_lint_refuses_non_finite_or_out_of_domain_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bound: str, minimum: str, where: str, message: str
) -> None:
    path = tmp_path / "loss.yaml"
    path.write_text(GATE.format(bound=bound, minimum=minimum))
    assert main(["lint", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{where}: gate 'g': {message}" in err


def test_finite_bounds_lint_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "loss.yaml"
    path.write_text(GATE.format(bound="0.005", minimum="0.01"))
    assert main(["lint", str(path)]) == 0, capsys.readouterr().err
