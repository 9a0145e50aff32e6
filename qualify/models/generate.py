"""Greedy chat generation, used to check that a loaded model actually answers sensibly."""

from __future__ import annotations

import torch

from qualify.models.loader import LoadedModel


@torch.no_grad()
def greedy_chat(loaded: LoadedModel, user_message: str, max_new_tokens: int = 32) -> str:
    """Answer one user turn with greedy decoding and return only the new text."""
    tokenizer = loaded.tokenizer
    encoded = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_message}], add_generation_prompt=True, return_tensors="pt"
    )
    # transformers 5 returns a BatchEncoding here; older versions returned the tensor itself.
    input_ids = encoded if isinstance(encoded, torch.Tensor) else encoded["input_ids"]
    input_ids = input_ids.to(loaded.device)
    output = loaded.model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=tokenizer.eos_token_id,
    )
    return tokenizer.decode(output[0, input_ids.shape[1] :], skip_special_tokens=True).strip()
