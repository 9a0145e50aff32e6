"""Building a vLLM engine for a serving layout, the prompts it is sent, and one timed batch.

Imports vLLM lazily: `EngineSettings` and the prompt builders are used by CPU code and tests too.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import os
import random
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qualify.cache_dir import cache_root
from qualify.cartridge.io import save_cartridge
from qualify.cartridge.types import Cartridge
from qualify.serve.config import Mode, ServingConfig, engine_kwargs
from qualify.serve.gc_pauses import GcPauses, gc_pauses
from qualify.serve.layouts import ServingLayout
from qualify.serve.settings import EngineSettings


def random_cartridge(config: dict[str, Any], tokens: int, *, seed: int, k_std: float, v_std: float) -> Cartridge:
    """A cartridge of the model's KV shape with Gaussian K and V (BF16); the same seed gives the same one."""
    heads = int(config.get("num_key_value_heads") or config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    gen = torch.Generator().manual_seed(seed)
    keys, values = [], []
    for _ in range(int(config["num_hidden_layers"])):
        keys.append((torch.randn(tokens, heads, head_dim, generator=gen) * k_std).to(torch.bfloat16))
        values.append((torch.randn(tokens, heads, head_dim, generator=gen) * v_std).to(torch.bfloat16))
    return Cartridge(keys=tuple(keys), values=tuple(values), frozen_tokens=1, source=f"random(seed={seed})")


def random_cartridge_file(settings: EngineSettings, tokens: int, seed: int) -> Path:
    """The random cartridge of these settings, length and seed, written once under the cache directory in a file
    named after what determines its content.

    vLLM keys its compile cache on its whole configuration, the cartridge's path (in ``additional_config``)
    included: a cartridge in a per-process temporary folder made every engine compile its graphs from scratch
    (23-44 s of each start on the H200). One path per content lets later engines load them; the cartridge's values
    are read by the backend at start-up and never traced, so sharing compiled graphs across cartridges is sound.
    """
    config = settings.hf_config()
    what = {"hf_config": config, "tokens": tokens, "seed": seed, "k_std": settings.cartridge_k_std,
            "v_std": settings.cartridge_v_std}  # fmt: skip
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]
    path = cache_root() / "cartridges" / f"random-{digest}.safetensors"
    if not path.is_file():
        cart = random_cartridge(
            config, tokens, seed=seed, k_std=settings.cartridge_k_std, v_std=settings.cartridge_v_std
        )
        # Written beside, then renamed: an engine of another process never reads a half-written file.
        partial = save_cartridge(cart, path.with_name(f"{path.stem}.{os.getpid()}.partial.safetensors"))
        os.replace(partial, path)
    return path


def served_from_stable_path(cartridge: Path, label: str) -> Path:
    """`cartridge`'s bytes at the one path `label` is served from on this machine's visible GPUs.

    For runs that serve many cartridges in one engine configuration (checkpoints, fake-quantized copies): vLLM's
    compile cache key holds the cartridge path, so one path per configuration lets every engine after the first
    load the compiled graphs. The content changes under the path; the engines that share a label run one after
    another (engines side by side get labels of their own), and each reads the file once, at start-up. Written
    beside and renamed into place.
    """
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "-") or "none"
    path = cache_root() / "served" / f"gpus-{gpus}" / f"{label}{cartridge.suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial{path.suffix}")
    shutil.copyfile(cartridge, partial)
    os.replace(partial, path)
    return path


def serving_config_for(
    layout: ServingLayout, cartridge: Path, cartridge_len: int, settings: EngineSettings
) -> ServingConfig:
    return ServingConfig(
        mode=layout.mode,
        path=str(cartridge),
        cartridge_len=cartridge_len,
        placeholder_token_id=settings.placeholder_token_id,
        cartridge_value_dtype=layout.cartridge_value_dtype,
        live_value_dtype=layout.live_value_dtype,
        kernel_launch=settings.kernel_launch,
    )


def llm_kwargs(
    layout: ServingLayout, cartridge: Path, cartridge_len: int, settings: EngineSettings, seed: int = 0
) -> dict[str, Any]:
    config = settings.hf_config()
    base: dict[str, Any] = {
        "model": str(settings.model_path()),
        "skip_tokenizer_init": True,
        "load_format": settings.load_format,
        "dtype": "bfloat16",
        "enforce_eager": settings.enforce_eager,
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "max_model_len": settings.max_model_len,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "disable_log_stats": False,  # per-request TTFT comes from the request metrics
        "seed": seed,
    }
    if layout.kv_cache_dtype != "auto":
        base["kv_cache_dtype"] = layout.kv_cache_dtype
    if settings.kv_cache_memory_bytes is not None:
        base["kv_cache_memory_bytes"] = settings.kv_cache_memory_bytes
    if not settings.enforce_eager and settings.cudagraph_capture_sizes is not None:
        base["compilation_config"] = {"cudagraph_capture_sizes": list(settings.cudagraph_capture_sizes)}
    cfg = serving_config_for(layout, cartridge, cartridge_len, settings)
    return engine_kwargs(cfg, config["architectures"][0], prefix_caching=layout.prefix_caching, **base)


# vLLM's start-up phases that say how long they took (model load, torch.compile, profiling, graph capture).
_STARTUP_LINE = re.compile(r"\btook\b|finished in")


@contextlib.contextmanager
def startup_phases() -> Iterator[list[str]]:
    """Collect vLLM's own log lines that time its start-up phases, while the block runs (in-process engine core:
    vLLM's loggers are children of ``vllm``)."""
    # vLLM configures its loggers with dictConfig when vllm.logger is first imported, which drops the handlers of
    # the `vllm` logger: a handler attached before that import (the engine is built inside this block, importing
    # vLLM there) would collect nothing. So vLLM's logging is configured first, where vLLM is installed.
    with contextlib.suppress(ImportError):
        importlib.import_module("vllm.logger")
    lines: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if _STARTUP_LINE.search(message):
                lines.append(message[:200])

    handler, log = _Collect(level=logging.INFO), logging.getLogger("vllm")
    level = log.level
    if log.getEffectiveLevel() > logging.INFO:  # vLLM configures INFO itself; a bare logger would drop the lines
        log.setLevel(logging.INFO)
    log.addHandler(handler)
    try:
        yield lines
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def build_llm(
    layout: ServingLayout, cartridge: Path, cartridge_len: int, settings: EngineSettings, seed: int = 0
) -> Any:
    from vllm import LLM

    from qualify.serve.plugin import require_supported_vllm

    require_supported_vllm()
    return LLM(**llm_kwargs(layout, cartridge, cartridge_len, settings, seed))


def prompt_token_ids(
    layout: ServingLayout, questions: list[list[int]], cartridge_len: int, placeholder: int
) -> list[list[int]]:
    """inject: the cartridge's placeholder run, then the question; shared: the question (positions are offset)."""
    if layout.mode is Mode.INJECT:
        return [[placeholder] * cartridge_len + q for q in questions]
    return [list(q) for q in questions]


def random_questions(n: int, length: int, vocab: int, rng: random.Random, avoid: int) -> list[list[int]]:
    out = []
    for _ in range(n):
        q = [rng.randrange(1, vocab) for _ in range(length)]
        out.append([t if t != avoid else avoid + 1 for t in q])
    return out


@dataclass(frozen=True)
class BatchTiming:
    wall_s: float
    output_tokens: int
    ttft_s: list[float]
    gc: GcPauses = field(default_factory=GcPauses)  # the collector's pauses inside the timed wall

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s

    @property
    def requests_per_s(self) -> float:
        return len(self.ttft_s) / self.wall_s

    def ttft_quantile_ms(self, q: float) -> float:
        return float(np.percentile(np.asarray(self.ttft_s), q * 100.0)) * 1e3


def sampling_params(max_tokens: int, logprobs: int | None = None) -> Any:
    from vllm import SamplingParams

    return SamplingParams(
        max_tokens=max_tokens,
        min_tokens=max_tokens,
        ignore_eos=True,
        temperature=0.0,
        detokenize=False,
        logprobs=logprobs,
    )


def run_batch(llm: Any, prompts: list[list[int]], max_tokens: int) -> BatchTiming:
    """Send the whole batch at once and wait for it: wall time, output tokens, each request's TTFT."""
    from vllm.inputs import TokensPrompt

    params = sampling_params(max_tokens)
    torch.cuda.synchronize()
    with gc_pauses() as pauses:
        start = time.perf_counter()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        wall = time.perf_counter() - start
    ttft, tokens = [], 0
    for o in outs:
        tokens += len(o.outputs[0].token_ids)
        m = getattr(o, "metrics", None)
        if m is None or not getattr(m, "first_token_latency", 0.0):
            raise RuntimeError("vLLM returned no per-request metrics (first_token_latency); is log stats disabled?")
        ttft.append(float(m.first_token_latency))
    return BatchTiming(wall_s=wall, output_tokens=tokens, ttft_s=ttft, gc=pauses)


def kv_capacity(llm: Any) -> dict[str, Any]:
    cc = llm.llm_engine.vllm_config.cache_config
    blocks = int(cc.num_gpu_blocks or 0)
    return {"num_gpu_blocks": blocks, "block_size": int(cc.block_size), "tokens": blocks * int(cc.block_size)}


def cudagraph_mode(llm: Any) -> str:
    """The CUDA-graph mode the engine was asked for, e.g. ``FULL_AND_PIECEWISE``; ``NONE`` in eager mode. The
    engine core may resolve a weaker one for a backend that cannot capture (the fused backend reports its own)."""
    mode = llm.llm_engine.vllm_config.compilation_config.cudagraph_mode
    return str(getattr(mode, "name", mode))
