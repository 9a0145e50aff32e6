"""Train a cartridge by self-study distillation: KL(teacher || student) on answer tokens.

The cartridge starts as the KV of the first T tokens of the teacher's own context (document prefix),
so its keys already carry RoPE for positions 0..T-1 and the student's input sits at positions T....
Position 0 (the chat's first token) stays frozen as the attention sink.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from qualify.cartridge.attach import hidden_states_with_prefix
from qualify.cartridge.selfstudy import TeacherTargets
from qualify.cartridge.types import Cartridge


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    lr: float
    seed: int
    batch_size: int = 4
    frozen_tokens: int = 1


@dataclass
class TrainResult:
    cartridge: Cartridge  # float32, (T, H, D) per layer
    losses: list[float] = field(default_factory=list)  # mean KL per step
    seconds: float = 0.0


def init_from_document(
    doc_keys: Sequence[torch.Tensor],
    doc_values: Sequence[torch.Tensor],
    num_tokens: int,
    frozen_tokens: int,
    source: str,
) -> Cartridge:
    """The untrained cartridge: the document prefix's own KV for its first `num_tokens` positions."""
    if num_tokens > doc_keys[0].shape[0]:
        raise ValueError(f"document prefix has {doc_keys[0].shape[0]} tokens, fewer than {num_tokens}")
    return Cartridge(
        keys=tuple(k[:num_tokens].clone().float() for k in doc_keys),
        values=tuple(v[:num_tokens].clone().float() for v in doc_values),
        frozen_tokens=frozen_tokens,
        source=source,
    )


def _sequence_kl_sum(
    model: torch.nn.Module, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], target: TeacherTargets
) -> torch.Tensor:
    """Sum over one sequence's answer tokens of KL(teacher || student) on the teacher's top-k tokens."""
    ids = torch.tensor([target.turn.input_ids])
    hidden = hidden_states_with_prefix(model, ids, keys, values)[0, target.positions]
    student = torch.log_softmax(model.lm_head(hidden).float(), dim=-1).gather(1, target.topk_ids)
    teacher = target.topk_logprobs
    return (teacher.exp() * (teacher - student)).sum()


def distill_loss(
    model: torch.nn.Module,
    keys: Sequence[torch.Tensor],
    values: Sequence[torch.Tensor],
    batch: Sequence[TeacherTargets],
) -> torch.Tensor:
    """Mean over all answer tokens of the batch of KL(teacher || student)."""
    tokens = sum(int(t.positions.numel()) for t in batch)
    return sum((_sequence_kl_sum(model, keys, values, t) for t in batch), torch.zeros(())) / tokens


def train_cartridge(
    model: torch.nn.Module, init: Cartridge, data: Sequence[TeacherTargets], config: TrainConfig
) -> TrainResult:
    """Adam on the trainable KV positions; the model's weights are never updated."""
    for p in model.parameters():
        p.requires_grad_(False)
    frozen = config.frozen_tokens
    fixed_k = [k[:frozen] for k in init.keys]
    fixed_v = [v[:frozen] for v in init.values]
    train_k = [k[frozen:].clone().requires_grad_(True) for k in init.keys]
    train_v = [v[frozen:].clone().requires_grad_(True) for v in init.values]
    optimizer = torch.optim.Adam([*train_k, *train_v], lr=config.lr)
    generator = torch.Generator().manual_seed(config.seed)

    result = TrainResult(cartridge=init)
    start = time.perf_counter()
    order: list[int] = []
    for _ in range(config.steps):
        if len(order) < config.batch_size:
            # Epochs in a seeded random order, so the run is reproducible from its seed alone.
            order += torch.randperm(len(data), generator=generator).tolist()
        batch = [data[i] for i in order[: config.batch_size]]
        del order[: config.batch_size]
        tokens = sum(int(t.positions.numel()) for t in batch)
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        # One sequence at a time, accumulating gradients: on CPU, padded batches take the masked
        # attention path, several times slower than unpadded sequences, and this keeps one
        # sequence's activations alive at a time.
        for target in batch:
            keys = [torch.cat([f, t]) for f, t in zip(fixed_k, train_k, strict=True)]
            values = [torch.cat([f, t]) for f, t in zip(fixed_v, train_v, strict=True)]
            loss = _sequence_kl_sum(model, keys, values, target) / tokens
            loss.backward()
            step_loss += loss.item()
        optimizer.step()
        result.losses.append(step_loss)
    result.seconds = time.perf_counter() - start
    result.cartridge = Cartridge(
        keys=tuple(torch.cat([f, t.detach()]) for f, t in zip(fixed_k, train_k, strict=True)),
        values=tuple(torch.cat([f, t.detach()]) for f, t in zip(fixed_v, train_v, strict=True)),
        frozen_tokens=frozen,
        source=init.source,
    )
    return result
