"""An lm-eval model: a Hugging Face causal LM whose KV cache stores keys and values as one layout does.

Registered in lm-eval's model registry as `qualify-kv` (see `qualify.accuracy.registration`), so any lm-eval task
runs under K16/V16, K16/V8, K8/V16 or K8/V8:

    lm_eval --model qualify-kv --model_args pretrained=/models/Qwen3-8B,layout=K8/V8 --tasks mmlu

Scoring is greedy and deterministic. Loglikelihood requests that share a context and continue it by one token
(every multiple-choice task with letter answers) share one forward pass. Batches are left-padded so every row's
continuation ends at the last position; a reference and a candidate layout see identical batches, so the
padding's tiny numerical effect cancels in paired comparisons.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from qualify.accuracy.kv_cache import KVWriteTransform, LayoutWrite, layout_write, new_cache
from qualify.hf_cache_arg import cache_kwargs

DEFAULT_MAX_GEN_TOKS = 256


@dataclass
class _Unit:
    """One forward pass's input and the continuations scored from its last positions."""

    tokens: list[int]
    scored: list[tuple[int, list[int]]] = field(default_factory=list)  # (request index, continuation tokens)

    @property
    def tail(self) -> int:
        return max(len(c) for _, c in self.scored)


class KVLayoutLM(TemplateLM):
    """lm-eval `TemplateLM` over an HF causal LM and tokenizer, with `kv_write` applied where the cache is written."""

    def __init__(
        self,
        pretrained: str | torch.nn.Module = "pypi-gguf",
        tokenizer: Any | None = None,
        layout: str = "K16/V16",
        scaling: str = "none",
        kv_write: KVWriteTransform | None = None,
        batch_size: int | str | None = 8,
        max_length: int | None = None,
        max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
        device: str | None = None,
        dtype: str = "auto",
        max_batch_size: int | None = None,  # lm-eval passes it; batches here are fixed-size
    ):
        # No **kwargs: a misspelt `layout=` from the lm-eval command line must fail, not silently run K16/V16.
        super().__init__()
        if isinstance(pretrained, str):
            # Only the lm-eval CLI path loads here; gates hand in the model the suite's loader already built.
            from qualify.models import load_causal_lm
            from qualify.models.spec import PathSpec, PypiGgufSpec

            where = device or "auto"
            if where.startswith("cuda") and not torch.cuda.is_available():
                # lm-eval's command line defaults to --device cuda; on a CPU host run where the model can.
                logging.getLogger(__name__).warning("CUDA is not available; loading %s on CPU", pretrained)
                where = "cpu"
            spec = (
                PypiGgufSpec(source="pypi-gguf", device=where, dtype=dtype)
                if pretrained == "pypi-gguf"
                else PathSpec(source="path", path=pretrained, device=where, dtype=dtype)
            )
            loaded = load_causal_lm(spec)
            pretrained, tokenizer = loaded.model, loaded.tokenizer
        if tokenizer is None:
            raise ValueError("a tokenizer is required when `pretrained` is a model object")
        self._model = pretrained
        self.tokenizer = tokenizer
        self.kv_write: KVWriteTransform = kv_write if kv_write is not None else layout_write(layout, scaling)
        self._device = next(pretrained.parameters()).device
        self._batch_size = int(batch_size) if batch_size not in (None, "auto") else 8
        config = pretrained.config
        self._max_length = int(max_length or getattr(config, "max_position_embeddings", 2048))
        self._max_gen_toks = int(max_gen_toks)
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    # ------------------------------------------------------------------ lm-eval properties

    @property
    def model(self) -> torch.nn.Module:
        return self._model

    @property
    def eot_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def prefix_token_id(self) -> int:
        bos = getattr(self.tokenizer, "bos_token_id", None)
        return int(bos) if bos is not None else self.eot_token_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", type(self.tokenizer).__name__)).replace("/", "__")

    @property
    def layout_label(self) -> str:
        return str(self.kv_write.layout) if isinstance(self.kv_write, LayoutWrite) else "custom"

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        return list(self.tokenizer.encode(string, add_special_tokens=bool(add_special_tokens)))

    def tok_decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    # ------------------------------------------------------------------ scoring

    def _left_pad(self, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
        # A plain forward numbers positions 0..T-1 regardless of the mask; left padding needs them from the mask.
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        return ids.to(self._device), mask.to(self._device), positions.to(self._device)

    @torch.no_grad()
    def _tail_log_probs(self, units: Sequence[_Unit]) -> torch.Tensor:
        """Log-probabilities (float32) at the last `max tail` positions of each unit, one forward pass."""
        ids, mask, positions = self._left_pad([u.tokens for u in units])
        tail = max(u.tail for u in units)
        out = self._model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            **cache_kwargs(self._model, new_cache(self.kv_write, self._model.config)),
            use_cache=True,
            logits_to_keep=tail,
        )
        return F.log_softmax(out.logits[:, -tail:, :].float(), dim=-1)

    def _units(self, requests: Sequence[tuple[Any, list[int], list[int]]]) -> list[_Unit]:
        by_prefix: dict[tuple[int, ...], _Unit] = {}
        units: list[_Unit] = []
        for index, (_, context, continuation) in enumerate(requests):
            if not continuation:
                raise ValueError(f"request {index} has an empty continuation")
            full = (list(context) + list(continuation))[-(self._max_length + 1) :]
            tokens = full[:-1]
            if len(continuation) == 1:
                unit = by_prefix.get(tuple(tokens))
                if unit is None:
                    unit = by_prefix[tuple(tokens)] = _Unit(tokens)
                    units.append(unit)
                unit.scored.append((index, list(continuation)))
            else:
                units.append(_Unit(tokens, [(index, list(continuation))]))
        return units

    def _loglikelihood_tokens(
        self, requests: list[tuple[tuple[str, str], list[int], list[int]]], disable_tqdm: bool = False, **_: Any
    ) -> list[tuple[float, bool]]:
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        units = sorted(self._units(requests), key=lambda u: -len(u.tokens))
        for start in range(0, len(units), self._batch_size):
            batch = units[start : start + self._batch_size]
            log_probs = self._tail_log_probs(batch)
            for row, unit in enumerate(batch):
                for index, continuation in unit.scored:
                    lp = log_probs[row, log_probs.shape[1] - len(continuation) :]
                    target = torch.tensor(continuation, device=lp.device)
                    score = float(lp.gather(-1, target[:, None]).sum())
                    greedy = bool((lp.argmax(-1) == target).all())
                    results[index] = (score, greedy)
                    self.cache_hook.add_partial("loglikelihood", requests[index][0], (score, greedy))
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise RuntimeError(f"loglikelihood requests {missing[:5]} were never scored")
        return [r for r in results if r is not None]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        totals = []
        for req in requests:
            (text,) = req.args
            windows = [
                ((None, None), *make_disjoint_window(w))
                for w in get_rolling_token_windows(
                    self.tok_encode(text), self.prefix_token_id, self._max_length, context_len=1
                )
            ]
            totals.append(sum(score for score, _ in self._loglikelihood_tokens(windows)))
        return totals

    # ------------------------------------------------------------------ generation

    @torch.no_grad()
    def _generate_batch(self, contexts: Sequence[list[int]], until: list[str], max_new: int) -> list[str]:
        ids, mask, _ = self._left_pad(contexts)
        output = self._model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new,
            do_sample=False,
            pad_token_id=self._pad_id,
            **cache_kwargs(self._model, new_cache(self.kv_write, self._model.config)),
            # Stop strings end rows early; without them every row would run to max_new on a slow CPU.
            stop_strings=until or None,
            tokenizer=self.tokenizer,
        )
        texts = []
        for row in output[:, ids.shape[1] :]:
            text = self.tok_decode(row.tolist())
            cut = min((text.find(s) for s in until if s and s in text), default=len(text))
            texts.append(text[:cut])
        return texts

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        results: list[str | None] = [None] * len(requests)
        groups: dict[tuple[tuple[str, ...], int], list[tuple[int, list[int]]]] = defaultdict(list)
        for index, req in enumerate(requests):
            context, gen_kwargs = req.args
            kwargs = dict(gen_kwargs or {})
            if kwargs.get("do_sample"):
                raise ValueError("qualify-kv decodes greedily; a task asked for sampling (do_sample: true)")
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            eos = self.tok_decode([self.eot_token_id])
            if eos and eos not in until:
                until.append(eos)
            max_new = int(kwargs.get("max_gen_toks", self._max_gen_toks))
            tokens = self.tok_encode(context)[-max(1, self._max_length - max_new) :]
            groups[(tuple(until), max_new)].append((index, tokens))
        for (until, max_new), members in groups.items():
            members.sort(key=lambda m: -len(m[1]))
            for start in range(0, len(members), self._batch_size):
                batch = members[start : start + self._batch_size]
                texts = self._generate_batch([t for _, t in batch], list(until), max_new)
                for (index, _), text in zip(batch, texts, strict=True):
                    results[index] = text
                    self.cache_hook.add_partial("generate_until", requests[index].args, text)
        return [r if r is not None else "" for r in results]
