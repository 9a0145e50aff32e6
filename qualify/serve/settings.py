"""Engine settings of the engine-level benchmark (no torch, no vLLM: the perf gate's schema uses them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qualify.schema.models import StrictModel
from qualify.serve.config import DEFAULT_KERNEL_LAUNCH, KernelLaunch

ROOT = Path(__file__).resolve().parents[2]


class EngineSettings(StrictModel):
    """How the engine is built; `model_dir` is relative to the repository root unless absolute."""

    model_dir: str = "fixtures/qwen3_8b"
    load_format: str = "dummy"
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 16384
    max_model_len: int = 2048
    gpu_memory_utilization: float = 0.85
    # vLLM's default mode: torch.compile with CUDA graphs (whole graphs for decode batches, piecewise otherwise).
    enforce_eager: bool = False
    # The batch sizes CUDA graphs are captured for (vLLM pads a batch up to the next one); None: vLLM's default
    # list. Fewer sizes start the engine faster.
    cudagraph_capture_sizes: list[int] | None = None
    # The KV cache in bytes instead of a share of the GPU (vLLM's kv_cache_memory_bytes): the same budget for every
    # layout, so that what fits follows from each layout's bytes per token.
    kv_cache_memory_bytes: int | None = None
    placeholder_token_id: int = 0
    # shared layouts: how the fused backend launches its kernels (ServingConfig.kernel_launch)
    kernel_launch: KernelLaunch = DEFAULT_KERNEL_LAUNCH
    cartridge_k_std: float = 1.0  # random cartridge scale: K after QK-norm is about unit RMS
    cartridge_v_std: float = 1.0

    def model_path(self) -> Path:
        p = Path(self.model_dir)
        return p if p.is_absolute() else ROOT / p

    def hf_config(self) -> dict[str, Any]:
        return json.loads((self.model_path() / "config.json").read_text())
