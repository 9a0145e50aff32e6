"""Which serving run scores each KV layout: the serving layout (`qualify.serve.layouts`), and for injection the
layout the cartridge is fake-quantized to first.

Torch-free, so gate lint can check layout names against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from qualify.quant.layouts import Layout


@dataclass(frozen=True)
class ScoringRun:
    """One process: a serving layout (qualify.serve.layouts), and for injection the layout the cartridge is
    fake-quantized to first (None: served as stored)."""

    layout: str
    fake_quant: str | None = None

    @property
    def label(self) -> str:
        return f"{self.layout}+{self.fake_quant}" if self.fake_quant else self.layout


# The BF16 reference of every gate that reads these scores: per-request injection of the cartridge as stored (FA3).
REFERENCE_RUN = ScoringRun("bf16-inject")
# What serves each layout: the shared path of the fused kernel where one exists (what ships), else injection of
# the cartridge fake-quantized to the layout (FP8 and FP4 keys have no serving path).
SERVED_RUNS: dict[Layout, ScoringRun] = {
    Layout.K16_V16: ScoringRun("shared-k16v16"),
    Layout.K16_V8: ScoringRun("shared-k16v8"),
    Layout.K8_V16: ScoringRun("bf16-inject", "K8/V16"),
    Layout.K8_V8: ScoringRun("bf16-inject", "K8/V8"),
    Layout.K4_V16: ScoringRun("bf16-inject", "K4/V16"),
}
