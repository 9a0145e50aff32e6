"""Self-study data for distilling a document into a cartridge (after the Cartridges paper's recipe).

The teacher is the model with the whole document in its context; the student sees a cartridge instead.
Training conversations are about the document: recitations of its passages (gold text) and the
teacher's own greedy answers to seed prompts about each passage. The teacher's next-token
distributions on the answers are computed once and kept as top-k log-probabilities.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from qualify.cartridge.attach import hidden_states_with_prefix, prefix_cache
from qualify.hf_cache_arg import cache_kwargs

# ChatML, as SmolLM2 and Qwen use; the strings are tokenized with their special tokens intact.
SYSTEM_PREAMBLE = "Answer questions using the following document."


@dataclass(frozen=True)
class Turn:
    """One user question and the assistant answer whose tokens are scored."""

    user: str
    answer: str


@dataclass(frozen=True)
class EncodedTurn:
    input_ids: list[int]
    answer_mask: list[int]  # 1 where the token is part of the answer (predicted from the tokens before it)


@dataclass(frozen=True)
class TeacherTargets:
    """Teacher top-k log-probs at every answer position of one encoded turn."""

    turn: EncodedTurn
    positions: torch.Tensor  # (N,) indices i-1 whose output predicts answer token i
    topk_ids: torch.Tensor  # (N, k)
    topk_logprobs: torch.Tensor  # (N, k) float32


def document_prefix_text(document: str) -> str:
    return f"<|im_start|>system\n{SYSTEM_PREAMBLE}\n\n{document.strip()}<|im_end|>\n"


def encode_ids(tokenizer: object, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_turn(tokenizer: object, turn: Turn) -> EncodedTurn:
    """Tokens that follow the document (or cartridge): the user turn, then the answer and its end marker.

    The two parts are tokenized separately so the answer mask boundary is exact.
    """
    head = encode_ids(tokenizer, f"<|im_start|>user\n{turn.user}<|im_end|>\n<|im_start|>assistant\n")
    answer = encode_ids(tokenizer, f"{turn.answer}<|im_end|>")
    return EncodedTurn(input_ids=head + answer, answer_mask=[0] * len(head) + [1] * len(answer))


def split_sentences(document: str) -> list[str]:
    # Sentence ends followed by a capital or quote; good enough for encyclopedic prose, and deterministic.
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z\"(])", " ".join(document.split()))
    return [p.strip() for p in parts if p.strip()]


def passages(document: str, max_words: int = 45) -> list[str]:
    """Runs of consecutive sentences of at most `max_words` words (a longer sentence stands alone)."""
    out: list[str] = []
    current: list[str] = []
    for paragraph in document.split("\n\n"):
        for sentence in split_sentences(paragraph):
            if current and len(" ".join([*current, sentence]).split()) > max_words:
                out.append(" ".join(current))
                current = []
            current.append(sentence)
        if current:
            out.append(" ".join(current))
            current = []
    return out


def _opening(text: str, words: int = 6) -> str:
    return " ".join(text.split()[:words])


RECITE_TEMPLATES = (
    'Quote the part of the document that begins with "{start}".',
    'Repeat, word for word, the passage of the document starting "{start}".',
    'What exactly does the document say in the passage beginning "{start}"?',
)
GENERATE_TEMPLATES = (
    'Summarize the passage of the document that begins "{start}" in one or two sentences.',
    'Ask a question about the passage beginning "{start}", then answer it from the document.',
    'Which facts, names and numbers does the passage beginning "{start}" mention?',
)


def recitation_turns(document: str, rng: random.Random) -> list[Turn]:
    return [Turn(rng.choice(RECITE_TEMPLATES).format(start=_opening(p)), p) for p in passages(document)]


def seed_prompts(document: str, rng: random.Random) -> list[str]:
    return [rng.choice(GENERATE_TEMPLATES).format(start=_opening(p)) for p in passages(document)]


@torch.no_grad()
def teacher_answer(
    model: torch.nn.Module,
    tokenizer: object,
    doc_keys: Sequence[torch.Tensor],
    doc_values: Sequence[torch.Tensor],
    user: str,
    max_new_tokens: int = 48,
) -> str:
    """Greedy answer of the teacher (document KV in context) to one user message."""
    ids = encode_ids(tokenizer, f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    position = int(doc_keys[0].shape[0])
    cache = prefix_cache(doc_keys, doc_values, model.config)  # grows as the answer is decoded
    step_ids = torch.tensor([ids])
    generated: list[int] = []
    for _ in range(max_new_tokens):
        positions = torch.arange(position, position + step_ids.shape[1]).unsqueeze(0)
        out = model.model(
            input_ids=step_ids, **cache_kwargs(model.model, cache), position_ids=positions, use_cache=True
        )
        position += step_ids.shape[1]
        next_id = int(model.lm_head(out.last_hidden_state[:, -1]).argmax(-1))
        if next_id == end_id:
            break
        generated.append(next_id)
        step_ids = torch.tensor([[next_id]])
    return tokenizer.decode(generated, skip_special_tokens=True).strip()


@torch.no_grad()
def teacher_targets(
    model: torch.nn.Module,
    doc_keys: Sequence[torch.Tensor],
    doc_values: Sequence[torch.Tensor],
    turns: Sequence[EncodedTurn],
    top_k: int = 32,
) -> list[TeacherTargets]:
    out = []
    # Unpadded, one turn at a time: faster on CPU than padded batches (see train.py).
    for turn in turns:
        positions = torch.nonzero(torch.tensor(turn.answer_mask[1:])).squeeze(1)  # output i predicts i+1
        hidden = hidden_states_with_prefix(model, torch.tensor([turn.input_ids]), doc_keys, doc_values)
        logprobs = torch.log_softmax(model.lm_head(hidden[0, positions]).float(), dim=-1)
        top = logprobs.topk(top_k, dim=-1)
        out.append(TeacherTargets(turn, positions, top.indices, top.values))
    return out
