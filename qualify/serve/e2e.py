"""End-to-end agreement of serving layouts in vLLM: greedy tokens and log-probabilities, one process per layout.

    qualify serve-agreement generate --layout bf16-prefix-cached --out ref.json [--eager]
    qualify serve-agreement compare ref.json cand.json --tie-eps 0.1 [--logprob-tolerance 0.1]

`generate` builds the layout's engine on a small Qwen3 (fixtures/qwen3_small, seeded weights) in vLLM's default
mode (torch.compile, CUDA graphs; ``--eager`` for eager mode), sends a fixed set of prompts (the same question
tokens for every layout; inject prepends the placeholder run) and writes greedy tokens with top-5
log-probabilities per position. A prefix-cached layout first serves one priming request, so that every
recorded prompt finds the cartridge's blocks in the prefix cache (the document keeps, per cartridge prompt, the
positions the cache held, from the inject connector's record).
The cartridge is random and seeded, identical for every layout. `compare` applies `qualify.serve.agreement`
and exits 1 when the check fails. The command line (`qualify.cli`) only parses arguments; both commands are here.
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any

from qualify.serve.agreement import generations_from_json, logprob_agreement, token_identity
from qualify.serve.dispatch_log import cartridge_positions, dispatch_log_in
from qualify.serve.layouts import layout
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


def generate(layout_name: str, out: Path, *, prompts: int, question_len: int, max_tokens: int, cartridge_len: int,
             seed: int, settings: EngineSettings = SMALL, eager: bool = False) -> dict[str, Any]:  # fmt: skip
    from vllm.inputs import TokensPrompt

    from qualify.serve.engine import (
        build_llm,
        kv_capacity,
        prompt_token_ids,
        random_questions,
        sampling_params,
        write_random_cartridge,
    )

    lay = layout(layout_name)
    settings = settings.model_copy(update={"enforce_eager": eager})
    vocab = int(settings.hf_config()["vocab_size"])
    questions = random_questions(prompts, question_len, vocab, random.Random(seed), settings.placeholder_token_id)
    with tempfile.TemporaryDirectory(prefix="qualify-e2e-") as tmp, dispatch_log_in(Path(tmp)) as log:
        cart = write_random_cartridge(Path(tmp) / "cartridge.safetensors", settings, cartridge_len, seed)
        llm = build_llm(lay, cart, cartridge_len, settings, seed=seed)
        token_ids = prompt_token_ids(lay, questions, cartridge_len, settings.placeholder_token_id)
        params = sampling_params(max_tokens, logprobs=5)
        if lay.prefix_caching:
            priming = random_questions(1, question_len, vocab, random.Random(seed + 1), settings.placeholder_token_id)
            prime = prompt_token_ids(lay, priming, cartridge_len, settings.placeholder_token_id)
            llm.generate([TokensPrompt(prompt_token_ids=p) for p in prime], sampling_params(1), use_tqdm=False)
        seen = len(cartridge_positions(log))
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in token_ids], params, use_tqdm=False)
        # What vLLM's prefix cache held of the cartridge for each recorded prompt, as the inject connector saw it
        # (vLLM's own per-request count adds the connector's positions, so it cannot tell a cache hit apart).
        from_cache = cartridge_positions(log)[seen:]
        block_size = kv_capacity(llm)["block_size"]
    records = []
    for o in outs:
        c = o.outputs[0]
        tops = [{str(t): float(lp.logprob) for t, lp in pos.items()} for pos in (c.logprobs or [])]
        records.append({"tokens": list(c.token_ids), "top_logprobs": tops})
    doc = {
        "layout": lay.name,
        "description": lay.description,
        "enforce_eager": settings.enforce_eager,
        "block_size": block_size,
        "cartridge_positions_cached": from_cache,  # one per cartridge prompt, in scheduling order
        "model_dir": settings.model_dir,
        "load_format": settings.load_format,
        "cartridge_len": cartridge_len,
        "seed": seed,
        "question_len": question_len,
        "records": records,
    }
    out.write_text(json.dumps(doc))
    return doc


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
