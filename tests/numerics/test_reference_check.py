"""`check: reference`: a NaN anywhere in the comparison fails the cell instead of reading as zero error."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from qualify.compile import compile_gate_file
from qualify.context import RunContext
from qualify.host import detect_host
from qualify.kinds.kernel_numerics.runner import run
from qualify.registry import default_registry

GATE = """
suite: ref
version: 1
gates:
  - id: ref
    kind: kernel_numerics
    check: reference
    phase: {phase}
    head_dim: 64
    num_qo_heads: 4
    num_kv_heads: 2
    repeats: 2
    cartridge: {{id: c16, length: 16, sink: true}}
    batch: {{id: b, q_lens: [5, 3], live_lens: [9, 12]}}
"""


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("bad_repeat", [0, 1])
def test_a_nan_reference_fails_the_reference_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str, bad_repeat: int, test_seed: int
) -> None:
    import cartridge_attn

    gate = tmp_path / "ref.yaml"
    gate.write_text(textwrap.dedent(GATE.format(phase=phase)))
    (item,) = compile_gate_file(gate, default_registry(), env={}).items
    ctx = RunContext(host=detect_host(), seed=test_seed)
    assert run(item, ctx).passed, ctx.seed

    real = cartridge_attn.reference_attention
    calls = []

    def nan_in_one_repeat(*args, **kwargs):
        out = real(*args, **kwargs)
        if len(calls) == bad_repeat:
            out[0, 0, 0] = float("nan")
        calls.append(1)
        return out

    monkeypatch.setattr(cartridge_attn, "reference_attention", nan_in_one_repeat)
    outcome = run(item, ctx)
    # Before the fix a NaN in the second repeat was dropped by max(worst, nan) and the cell passed.
    assert not outcome.passed, (ctx.seed, outcome.checks)
    assert math.isnan(outcome.checks[0].observed)
