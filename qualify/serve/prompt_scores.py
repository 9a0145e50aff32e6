"""Eval-set answer-token loss through the serving path: vLLM's prompt log-probabilities, one process per layout.

    qualify serve-loss score --layout shared-k16v8 --out k16v8.json --model-dir DIR \
        --cartridge fixtures/fifa_world_cup/run1.pt --eval-set fixtures/fifa_world_cup/eval_set.json
    qualify serve-loss score --layout bf16-inject --fake-quant K8/V8 --out k8v8.json ...
    qualify serve-loss compare bf16.json k16v8.json k8v8.json
    qualify serve-loss boolq bf16.json k16v8.json --eval-set fixtures/fifa_world_cup/eval_set.json   (yes_no.py)

`score` serves every eval item (its `input_ids`, the question and its gold answer) behind the cartridge in one
layout, asks vLLM for the prompt's log-probabilities (top-k and the gold token at every position) and keeps
those of the answer positions. FP8 keys have no serving path here, so K8 layouts are served through per-request
injection of the cartridge fake-quantized as `qualify.quant.apply` stores it (`--fake-quant`), which is also how
the CPU evaluation quantizes. vLLM skips its prefix cache for requests that ask for prompt log-probabilities, so
prefix-cached layouts would measure injection: use `bf16-inject` as the BF16 reference.

`compare` computes, per layout against the reference and paired over items as the CPU evaluation does: the loss
(summed answer NLL / answer tokens), its relative increase with a paired bootstrap CI, top-1 agreement, and a
lower bound of KL(reference || layout) per answer token: the KL between the two distributions coarsened to the
tokens both top-k lists hold plus one bin for the rest, which the data-processing inequality puts below the full
KL, so a control that fires on it fires on the full KL too.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qualify.errors import DataError

DEFAULT_TOP_K = 20  # vLLM caps prompt log-probabilities at max_logprobs, 20 unless the engine raises it


@dataclass(frozen=True)
class ItemScores:
    """One item's answer positions: the gold token's log-probability and the top-k, per position."""

    id: str
    gold: list[float]
    tops: list[dict[int, float]]


def item_scores(item_id: str, item_ids: Sequence[int], mask: Sequence[int], entries: Sequence[Any]) -> ItemScores:
    """The answer positions of one item from vLLM's prompt log-probabilities of the whole prompt.

    `entries` has one entry per prompt position (None where vLLM computed none: the first token, positions
    served from a connector or cache); the item is the prompt's tail, so entries are aligned from the end.
    Each entry maps token id -> a log-probability (a float or an object with `.logprob`)."""
    if mask and mask[0]:
        # Its context is the cartridge's last position, which vLLM does not compute in inject mode (the connector
        # loads it), so no prompt log-probability exists for it there. This also keeps the placeholder rows out:
        # vLLM's V1 runner leaves them uninitialized (the default V2 runner returns only the item's entries).
        raise DataError(item_id, "the item's first token is an answer token: it has no scored context position")
    if len(entries) < len(item_ids):
        raise DataError(item_id, f"{len(entries)} prompt log-probabilities for an item of {len(item_ids)} tokens")
    tail = list(entries)[len(entries) - len(item_ids) :]
    gold, tops = [], []
    for pos, (token, answer) in enumerate(zip(item_ids, mask, strict=True)):
        if not answer:
            continue
        entry = tail[pos]
        if entry is None or token not in entry:
            raise DataError(item_id, f"no prompt log-probability for answer token {token} at position {pos}")
        lp = {int(t): float(getattr(v, "logprob", v)) for t, v in entry.items()}
        gold.append(lp[token])
        tops.append(lp)
    return ItemScores(item_id, gold, tops)


# Below this, a "rest" bin's mass is float32 rounding of the log-softmax (~1e-6 per value at logits near 20).
_REST_FLOOR = 1e-5


def coarse_kl(ref: dict[int, float], lay: dict[int, float]) -> float:
    """KL(ref || lay) over the tokens both top-k lists hold, plus one bin for every other token (nats).

    A coarsening of both distributions, so never above the full KL (data-processing inequality); 0 when the
    two lists are equal. Where the rest of either side is within rounding of zero, it is merged into the least
    likely shared token's bin (still a coarsening): a rounded-away rest would otherwise weigh log(p / ~0)."""
    shared = sorted(ref.keys() & lay.keys(), key=lambda t: -ref[t])
    if not shared:
        return 0.0
    p = [math.exp(ref[t]) for t in shared]
    q = [math.exp(lay[t]) for t in shared]
    p_rest, q_rest = 1.0 - sum(p), 1.0 - sum(q)
    if min(p_rest, q_rest) < _REST_FLOOR:
        p[-1] += max(p_rest, 0.0)
        q[-1] += max(q_rest, 0.0)
        bins = list(zip(p, q, strict=True))
    else:
        bins = [*zip(p, q, strict=True), (p_rest, q_rest)]
    return max(sum(a * math.log(a / b) for a, b in bins if a > 0.0), 0.0)


def _items(doc: dict[str, Any]) -> list[ItemScores]:
    return [ItemScores(i["id"], i["gold"], [{int(t): v for t, v in top.items()} for top in i["tops"]])
            for i in doc["items"]]  # fmt: skip


@dataclass(frozen=True)
class PairedScores:
    """Per item, in the reference's order: answer tokens, both summed NLLs, the KL lower bound, top-1 matches."""

    ids: tuple[str, ...]
    tokens: np.ndarray
    reference_nll: np.ndarray
    nll: np.ndarray
    kl: np.ndarray
    top1: np.ndarray


def paired_scores(reference: dict[str, Any], layout: dict[str, Any]) -> PairedScores:
    ref, lay = _items(reference), _items(layout)
    if [i.id for i in ref] != [i.id for i in lay] or [len(i.gold) for i in ref] != [len(i.gold) for i in lay]:
        raise DataError(layout.get("label", "layout"), "not scored on the reference's items and answer tokens")
    pairs = [list(zip(r.tops, c.tops, strict=True)) for r, c in zip(ref, lay, strict=True)]
    return PairedScores(
        ids=tuple(i.id for i in ref),
        tokens=np.array([len(i.gold) for i in ref], dtype=np.int64),
        reference_nll=np.array([-sum(i.gold) for i in ref]),
        nll=np.array([-sum(i.gold) for i in lay]),
        kl=np.array([sum(coarse_kl(a, b) for a, b in item) for item in pairs]),
        top1=np.array([sum(max(a, key=a.get) == max(b, key=b.get) for a, b in item) for item in pairs], dtype=np.int64),
    )


def compare_scores(
    reference: dict[str, Any], layout: dict[str, Any], *, n_resamples: int = 2000, confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """A layout's answer-token loss against the reference's, paired over the same items."""
    from qualify.stats.bootstrap import bootstrap_indices, ratio_of_sums_ci

    p = paired_scores(reference, layout)
    tokens = int(p.tokens.sum())
    indices = bootstrap_indices(len(p.ids), np.random.default_rng(seed), n_resamples)
    ci = ratio_of_sums_ci(p.nll, p.reference_nll, indices, confidence)
    return {
        "reference": reference.get("label"),
        "layout": layout.get("label"),
        "items": len(p.ids),
        "answer_tokens": tokens,
        "reference_loss": float(p.reference_nll.sum() / tokens),
        "loss": float(p.nll.sum() / tokens),
        "rel_increase": ci.estimate - 1.0,
        "ci": [ci.low - 1.0, ci.high - 1.0],
        "confidence": confidence,
        "kl_lower_bound_per_token": float(p.kl.sum() / tokens),
        "top1_agreement": float(p.top1.sum() / tokens),
    }


def _item_json(s: ItemScores) -> dict[str, Any]:
    return {"id": s.id, "gold": s.gold, "tops": [{str(t): v for t, v in top.items()} for top in s.tops]}


def _fake_quantized(cartridge_file: Path, layout: str, into: Path, scaling: str) -> Path:
    from qualify.cartridge.io import load_cartridge, save_cartridge
    from qualify.quant.apply import apply_layout

    quantized, _ = apply_layout(load_cartridge(cartridge_file), layout, scaling)
    return save_cartridge(quantized, into / f"cartridge-{layout.replace('/', '')}.safetensors")


def score(
    layout_name: str, out: Path, *, settings: Any, cartridge_file: Path, eval_set: Path, fake_quant: str | None,
    scaling: str = "none", top_k: int = DEFAULT_TOP_K, seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """Serve every eval item behind the cartridge in one layout and write its answer positions' scores."""
    from qualify.hashing import sha256_file
    from qualify.serve.config import Mode
    from qualify.serve.e2e import checked_inputs
    from qualify.serve.layouts import layout

    lay = layout(layout_name)
    if fake_quant is not None and lay.mode is not Mode.INJECT:
        raise DataError("--fake-quant", f"a fake-quantized cartridge is served by injection, not by {lay.name}")
    cart, items = checked_inputs(settings, cartridge_file, eval_set)
    cart_len = cart.num_tokens

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from qualify.serve.engine import build_llm, prompt_token_ids, served_from_stable_path

    with tempfile.TemporaryDirectory(prefix="qualify-loss-") as tmp:
        made = _fake_quantized(cartridge_file, fake_quant, Path(tmp), scaling) if fake_quant else cartridge_file
        # Every checkpoint of a layout (and fake quantization) from one path: later engines hit vLLM's compile cache.
        # One path per fake quantization too: the loss gate scores them side by side (qualify.serve.score_processes).
        quant = f"-{fake_quant.replace('/', '')}" if fake_quant else ""
        served = served_from_stable_path(made, f"loss-{lay.name}{quant}")
        llm = build_llm(lay, served, cart_len, settings, seed=seed)
        prompts = prompt_token_ids(lay, [list(i.input_ids) for i in items], cart_len, settings.placeholder_token_id)
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=top_k, detokenize=False)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    try:
        scores = [item_scores(i.id, i.input_ids, i.answer_mask, o.prompt_logprobs or [])
                  for i, o in zip(items, outs, strict=True)]  # fmt: skip
    except DataError as exc:
        raise DataError(f"{eval_set} ({lay.name})", str(exc)) from None
    doc = {
        "label": f"{lay.name}{f'+{fake_quant}' if fake_quant else ''}",
        "layout": lay.name,
        "fake_quant": fake_quant,
        "scaling": scaling if fake_quant else None,
        "enforce_eager": settings.enforce_eager,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "model_dir": settings.model_dir,
        "cartridge": str(cartridge_file),
        "cartridge_sha256": sha256_file(cartridge_file),
        "eval_set": str(eval_set),
        "top_k": top_k,
        "items": [_item_json(s) for s in scores],
    }
    out.write_text(json.dumps(doc))
    return doc
