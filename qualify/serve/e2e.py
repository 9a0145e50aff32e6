"""End-to-end agreement of serving layouts in vLLM: greedy tokens and log-probabilities, one process per layout.

    qualify serve-agreement generate --layout bf16-prefix-cached --out ref.json [--eager]
    qualify serve-agreement generate --layout shared-k16v8 --out cand.json [--kv-cache-layout HND] --model-dir DIR \
        --cartridge fixtures/fifa_world_cup/run1.pt --eval-set fixtures/fifa_world_cup/eval_set.json
    qualify serve-agreement compare ref.json cand.json --tie-eps 0.1 [--logprob-tolerance 0.1]

`generate` builds the layout's engine in vLLM's default mode (torch.compile, CUDA graphs; ``--eager`` for eager
mode), sends a fixed set of prompts (the same question tokens for every layout; inject prepends the placeholder
run) and writes greedy tokens with top-5 log-probabilities per position. What it sends is a `Workload`: by
default a small Qwen3 (fixtures/qwen3_small, seeded weights) with a random seeded cartridge and random questions;
with ``--model-dir`` a real model (e.g. SmolLM2-135M converted from its GGUF) with a trained cartridge and the
eval set's questions (each item's tokens before its answer). A prefix-cached layout first serves one priming
request, so that every recorded prompt finds the cartridge's blocks in the prefix cache (the document keeps, per
cartridge prompt, the positions the cache held, from the inject connector's record). `compare` applies
`qualify.serve.agreement` and exits 1 when the check fails. The command line (`qualify.cli`) only parses
arguments; both commands are here.
"""

from __future__ import annotations

import json
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from qualify.cartridge.types import Cartridge
from qualify.errors import DataError
from qualify.hashing import sha256_file
from qualify.loss.data import EvalItem
from qualify.serve.agreement import generations_from_json, logprob_agreement, token_identity
from qualify.serve.config import DEFAULT_KERNEL_LAUNCH, VLLM_KV_CACHE_LAYOUT_ENV, KernelLaunch, KVCacheLayout
from qualify.serve.dispatch_log import (
    KV_CACHE_LAYOUT_NOTE,
    KV_CACHE_ORDER_NOTE,
    PREFILL_IMPL_NOTE,
    cartridge_positions,
    direct_launches_seen,
    dispatch_log_in,
    read_dispatch_log,
    read_dispatch_notes,
)
from qualify.serve.layouts import layout
from qualify.serve.scoped_env import scoped_env
from qualify.serve.settings import EngineSettings

SMALL = EngineSettings(
    model_dir="fixtures/qwen3_small",
    load_format="qualify_seeded",
    max_num_seqs=16,
    max_num_batched_tokens=16384,
    max_model_len=2048,
    gpu_memory_utilization=0.3,
    # No graph for 8: the 8 prompts decode in the 16-request graph, 8 of its requests padding.
    cudagraph_capture_sizes=[1, 2, 4, 16],
)


@dataclass(frozen=True)
class Workload:
    """What every layout of one agreement run is sent: the engine, the cartridge and the questions."""

    settings: EngineSettings
    cartridge_len: int
    questions: list[list[int]]
    priming: list[int]  # a prefix-cached layout's first request (not recorded), so the cache holds the cartridge
    cartridge_file: Path | None  # None: the seeded random cartridge of the model's KV shape
    source: str


def random_workload(
    settings: EngineSettings, *, prompts: int, question_len: int, cartridge_len: int, seed: int
) -> Workload:
    from qualify.serve.engine import random_questions

    vocab, avoid = int(settings.hf_config()["vocab_size"]), settings.placeholder_token_id
    questions = random_questions(prompts, question_len, vocab, random.Random(seed), avoid)
    priming = random_questions(1, question_len, vocab, random.Random(seed + 1), avoid)[0]
    source = f"random questions of {question_len} tokens, random cartridge of {cartridge_len} positions (seed {seed})"
    return Workload(settings, cartridge_len, questions, priming, None, source)


def checked_inputs(settings: EngineSettings, cartridge_file: Path, eval_set: Path) -> tuple[Cartridge, list[EvalItem]]:
    """A trained cartridge and an eval set to serve with the settings' model: the cartridge must fit the model's
    KV shape, every token must be in its vocabulary, and no item may hold the placeholder token that marks the
    cartridge's positions; DataError naming the file (and item) otherwise."""
    from qualify.cartridge.io import load_cartridge
    from qualify.cartridge.types import ModelKVShape
    from qualify.cartridge.validate import validate_cartridge
    from qualify.loss.data import check_vocab, load_eval_set

    config = settings.hf_config()
    cart = load_cartridge(cartridge_file)
    validate_cartridge(cart, ModelKVShape.from_hf_config(SimpleNamespace(**config)))
    items = list(load_eval_set(eval_set).items)
    check_vocab(items, int(config["vocab_size"]), str(eval_set))
    placeholder = settings.placeholder_token_id
    for k, item in enumerate(items):
        if placeholder in item.input_ids:
            raise DataError(str(eval_set), f"items[{k}] ({item.id}): holds the placeholder token {placeholder} that "
                                           "marks the cartridge's positions")  # fmt: skip
    return cart, items


def eval_set_workload(settings: EngineSettings, cartridge_file: Path, eval_set: Path, *, prompts: int) -> Workload:
    """A trained cartridge and the first `prompts` questions of an eval set (each item's `input_ids` before its
    answer, as the loss evaluation tokenized them); the next item primes the prefix cache."""
    cart, items = checked_inputs(settings, cartridge_file, eval_set)
    if len(items) < prompts + 1:
        raise DataError(str(eval_set), f"`items`: {prompts} questions and one to prime the cache need "
                                       f"{prompts + 1} items, not {len(items)}")  # fmt: skip
    questions = []
    for i, item in enumerate(items[: prompts + 1]):
        question = item.input_ids[: item.answer_mask.index(1)] if 1 in item.answer_mask else ()
        if not question:
            raise DataError(str(eval_set), f"items[{i}] ({item.id}): no question before an answer")
        questions.append(list(question))
    source = f"trained cartridge {cartridge_file} ({cart.num_tokens} positions), questions of {eval_set}"
    return Workload(settings, cart.num_tokens, questions[:prompts], questions[prompts], cartridge_file, source)


def generate(
    layout_name: str,
    out: Path,
    workload: Workload,
    *,
    max_tokens: int,
    seed: int,
    eager: bool = False,
    kernel_launch: KernelLaunch = DEFAULT_KERNEL_LAUNCH,
    kv_cache_layout: KVCacheLayout | None = None,
) -> dict[str, Any]:
    """Serve the workload in one layout and write its record to `out`. `kv_cache_layout` asks vLLM for that KV
    cache layout through ``VLLM_KV_CACHE_LAYOUT``, as a user would (None: the environment's, else vLLM's NHD). vLLM
    resolves the layout once per process, so it holds for the process's first engine; the record says which layout,
    cache order and prefill implementations the fused backend saw."""
    from vllm.inputs import TokensPrompt

    from qualify.serve.engine import build_llm, kv_capacity, prompt_token_ids, random_cartridge_file, sampling_params

    lay = layout(layout_name)
    settings = EngineSettings.model_validate(
        workload.settings.model_dump() | {"enforce_eager": eager, "kernel_launch": kernel_launch}
    )
    cartridge_len, placeholder = workload.cartridge_len, settings.placeholder_token_id
    with (
        tempfile.TemporaryDirectory(prefix="qualify-e2e-") as tmp,
        dispatch_log_in(Path(tmp)) as log,
        scoped_env(VLLM_KV_CACHE_LAYOUT_ENV, kv_cache_layout),
    ):
        cart = workload.cartridge_file or random_cartridge_file(settings, cartridge_len, seed)
        llm = build_llm(lay, cart, cartridge_len, settings, seed=seed)
        token_ids = prompt_token_ids(lay, workload.questions, cartridge_len, placeholder)
        params = sampling_params(max_tokens, logprobs=5)
        if lay.prefix_caching:
            prime = prompt_token_ids(lay, [workload.priming], cartridge_len, placeholder)
            llm.generate([TokensPrompt(prompt_token_ids=p) for p in prime], sampling_params(1), use_tqdm=False)
        seen = len(cartridge_positions(log))
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in token_ids], params, use_tqdm=False)
        # What vLLM's prefix cache held of the cartridge for each recorded prompt, as the inject connector saw it
        # (vLLM's own per-request count adds the connector's positions, so it cannot tell a cache hit apart).
        from_cache = cartridge_positions(log)[seen:]
        block_size = kv_capacity(llm)["block_size"]
        direct = direct_launches_seen(log)
        notes = read_dispatch_notes(log)
        dispatched = read_dispatch_log(log)
    records = []
    for o in outs:
        c = o.outputs[0]
        tops = [{str(t): float(lp.logprob) for t, lp in pos.items()} for pos in (c.logprobs or [])]
        records.append({"tokens": list(c.token_ids), "top_logprobs": tops})
    doc = {
        "layout": lay.name,
        "description": lay.description,
        "enforce_eager": settings.enforce_eager,
        "kernel_launch": settings.kernel_launch,
        "fused_direct_launches": direct,  # whether the fused backend launched any variant directly
        "kv_cache_layout_requested": kv_cache_layout,
        # What the fused backend read inside the engine core (empty for the layouts it does not serve).
        "kv_cache_layouts": notes.get(KV_CACHE_LAYOUT_NOTE, []),
        "kv_cache_orders": notes.get(KV_CACHE_ORDER_NOTE, []),
        "prefill_impls": notes.get(PREFILL_IMPL_NOTE, []),
        # Every kernel variant the fused backend planned (cartridge_attn's specialization keys), so a record shows
        # which tiles served it and a reader can match them to what the numerics gate qualified.
        "dispatched": dispatched,
        "block_size": block_size,
        "cartridge_positions_cached": from_cache,  # one per cartridge prompt, in scheduling order
        "model_dir": settings.model_dir,
        "load_format": settings.load_format,
        "cartridge_len": cartridge_len,
        "seed": seed,
        "workload": workload.source,
        "cartridge_sha256": sha256_file(workload.cartridge_file) if workload.cartridge_file else None,
        "question_lens": [len(q) for q in workload.questions],
        "records": records,
    }
    out.write_text(json.dumps(doc))
    return doc


def workload_for(
    *, model_dir: str | None, cartridge: Path | None, eval_set: Path | None, prompts: int, question_len: int,
    cartridge_len: int, seed: int,
) -> Workload:  # fmt: skip
    """The workload the command line asks for; DataError naming the option or file when it does not add up."""
    if model_dir is None:
        if cartridge is not None or eval_set is not None:
            raise DataError("--cartridge/--eval-set", "a trained cartridge and eval set need --model-dir")
        return random_workload(SMALL, prompts=prompts, question_len=question_len, cartridge_len=cartridge_len,
                               seed=seed)  # fmt: skip
    if cartridge is None or eval_set is None:
        raise DataError("--model-dir", "a real model is served with --cartridge FILE and --eval-set FILE")
    return eval_set_workload(real_model_settings(model_dir), cartridge, eval_set, prompts=prompts)


def real_model_settings(model_dir: str) -> EngineSettings:
    """The small engine of these runs over a real model's Hugging Face folder (its own weights).

    The KV cache gets a fixed size (two full batches of BF16 keys and values) instead of a share of the GPU: vLLM
    then skips its free-memory profile, whose check fails when another process on the GPU frees memory meanwhile,
    so that the agreement, loss and gate runs of one host can share the GPU (none of them is timed).
    """
    settings = SMALL.model_copy(update={"model_dir": model_dir, "load_format": "auto"})
    if not (settings.model_path() / "config.json").is_file():
        raise DataError(str(settings.model_path()), "no config.json: not a Hugging Face model folder")
    cfg = settings.hf_config()
    try:
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        per_token = cfg["num_hidden_layers"] * cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * head_dim * 4
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        raise DataError(str(settings.model_path() / "config.json"), f"no attention shape ({exc!r})") from None
    kv_bytes = 2 * settings.max_num_seqs * settings.max_model_len * per_token
    return settings.model_copy(update={"kv_cache_memory_bytes": kv_bytes})


def compare(reference: Path, candidate: Path, *, tie_eps: float, logprob_tolerance: float | None) -> dict[str, Any]:
    ref, cand = json.loads(reference.read_text()), json.loads(candidate.read_text())
    r, c = generations_from_json(ref["records"]), generations_from_json(cand["records"])
    result: dict[str, Any] = {
        "reference": ref["layout"],
        "candidate": cand["layout"],
        "token_identity": token_identity(r, c, tie_eps=tie_eps).as_dict(),
        "tie_eps_nats": tie_eps,
    }
    lp = logprob_agreement(r, c, tolerance=logprob_tolerance if logprob_tolerance is not None else float("inf"))
    result["logprobs"] = lp.as_dict()
    checks = [result["token_identity"]["passed"]] if logprob_tolerance is None else [lp.passed]
    result["passed"] = all(checks)
    result["checked"] = "token identity" if logprob_tolerance is None else "log-probability tolerance"
    return result


def compare_command(reference: Path, candidate: Path, *, tie_eps: float, logprob_tolerance: float | None) -> int:
    """`qualify serve-agreement compare`: print the comparison as JSON; 0 when the check passes, else 1."""
    result = compare(reference, candidate, tie_eps=tie_eps, logprob_tolerance=logprob_tolerance)
    print(json.dumps(result, indent=1))
    return 0 if result["passed"] else 1
