"""Mean next-token loss on answer tokens, with a KV prefix (cartridge or document) or none."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from qualify.cartridge.attach import hidden_states_with_prefix


def answer_token_nll_per_item(
    model: torch.nn.Module,
    input_ids: Sequence[Sequence[int]],
    answer_masks: Sequence[Sequence[int]],
    keys: Sequence[torch.Tensor] | None = None,
    values: Sequence[torch.Tensor] | None = None,
) -> list[tuple[float, int]]:
    """(summed NLL in nats, answer-token count) per item; mask[i]=1 scores token i given tokens < i.

    Items run one at a time, unpadded: on CPU that beats padded batches (masked attention path).
    """
    out = []
    with torch.no_grad():
        for ids, mask in zip(input_ids, answer_masks, strict=True):
            x = torch.tensor([list(ids)])
            cols = torch.nonzero(torch.tensor(list(mask[1:]))).squeeze(1)  # output i-1 predicts token i
            hidden = hidden_states_with_prefix(model, x, keys, values)[0, cols]
            logits = model.lm_head(hidden).float()
            nll = torch.nn.functional.cross_entropy(logits, x[0, cols + 1], reduction="sum")
            out.append((float(nll), int(cols.numel())))
    return out


def token_weighted_mean(per_item: Sequence[tuple[float, int]]) -> float:
    return sum(s for s, _ in per_item) / max(sum(n for _, n in per_item), 1)


def answer_token_nll(
    model: torch.nn.Module,
    input_ids: Sequence[Sequence[int]],
    answer_masks: Sequence[Sequence[int]],
    keys: Sequence[torch.Tensor] | None = None,
    values: Sequence[torch.Tensor] | None = None,
) -> float:
    """Token-weighted mean NLL (nats) of the answer tokens of all items."""
    return token_weighted_mean(answer_token_nll_per_item(model, input_ids, answer_masks, keys, values))
