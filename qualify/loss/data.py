"""Reading and validating the eval set (`cartridge-qualify/eval-set/v1`).

File format, written by the fixture script:

    {"format": "cartridge-qualify/eval-set/v1", "tokenizer": "<model id>",
     "items": [{"id": str, "text": str, "input_ids": [int, ...], "answer_mask": [0|1, ...]}, ...]}

`answer_mask[i] == 1` makes token i an answer token: its loss, predicted from positions < i, counts.

`answer_mask[0]` must be 0, with or without a cartridge. A cartridge is a KV cache: it holds the keys and
values of its positions but not the hidden state of its last position, so no logits exist that predict the
item's first token. Counting it would need a made-up prediction, and silently skipping it would shift the
token count between runs, so the file is rejected instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qualify.errors import DataError

FORMAT_TAG = "cartridge-qualify/eval-set/v1"


@dataclass(frozen=True)
class EvalItem:
    id: str
    text: str
    input_ids: tuple[int, ...]
    answer_mask: tuple[int, ...]

    @property
    def num_answer_tokens(self) -> int:
        return sum(self.answer_mask)


@dataclass(frozen=True)
class EvalSet:
    path: str
    sha256: str  # of the file's bytes, for provenance in the report
    tokenizer: str
    items: tuple[EvalItem, ...]

    @property
    def num_answer_tokens(self) -> int:
        return sum(item.num_answer_tokens for item in self.items)


def _is_int(v: object) -> bool:
    # JSON true/false arrive as bool, a subclass of int; they are not token ids or mask bits.
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_item(path: str, index: int, raw: Any) -> EvalItem:
    if not isinstance(raw, dict):
        raise DataError(path, f"items[{index}]: expected an object, got {type(raw).__name__}")
    name = f"items[{index}]"
    item_id = raw.get("id")
    if isinstance(item_id, str):
        name = f"item {item_id!r} (items[{index}])"
    for field, kind in (("id", str), ("text", str), ("input_ids", list), ("answer_mask", list)):
        if field not in raw:
            raise DataError(path, f"{name}: missing field {field!r}")
        if not isinstance(raw[field], kind):
            raise DataError(path, f"{name}: field {field!r} must be a {kind.__name__}")
    ids, mask = raw["input_ids"], raw["answer_mask"]
    for pos, tok in enumerate(ids):
        if not _is_int(tok) or tok < 0:
            raise DataError(path, f"{name}: field 'input_ids'[{pos}] is {tok!r}, not a non-negative int")
    for pos, bit in enumerate(mask):
        if not _is_int(bit) or bit not in (0, 1):
            raise DataError(path, f"{name}: field 'answer_mask'[{pos}] is {bit!r}, not 0 or 1")
    if len(ids) != len(mask):
        raise DataError(path, f"{name}: field 'answer_mask' has {len(mask)} entries but 'input_ids' has {len(ids)}")
    if sum(mask) == 0:
        raise DataError(path, f"{name}: field 'answer_mask' marks no answer tokens")
    if mask[0] == 1:
        raise DataError(
            path,
            f"{name}: field 'answer_mask'[0] is 1, but the first token has no prediction "
            "(a cartridge holds K/V, not the logits of its last position); start answers at index >= 1",
        )
    return EvalItem(id=raw["id"], text=raw["text"], input_ids=tuple(ids), answer_mask=tuple(mask))


def parse_eval_set(path: str, raw_bytes: bytes) -> EvalSet:
    """Validate the bytes of an eval-set file; `path` names it in errors."""
    try:
        doc = json.loads(raw_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(path, f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise DataError(path, "top level must be a JSON object")
    if doc.get("format") != FORMAT_TAG:
        raise DataError(path, f"field 'format' is {doc.get('format')!r}, expected {FORMAT_TAG!r}")
    if not isinstance(doc.get("tokenizer"), str):
        raise DataError(path, "field 'tokenizer' must be a string naming the model id")
    raw_items = doc.get("items")
    if not isinstance(raw_items, list) or not raw_items:
        raise DataError(path, "field 'items' must be a non-empty list")
    items = tuple(_parse_item(path, i, raw) for i, raw in enumerate(raw_items))
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        if item.id in first_seen:
            raise DataError(path, f"item {item.id!r} (items[{i}]): field 'id' duplicates items[{first_seen[item.id]}]")
        first_seen[item.id] = i
    return EvalSet(path=path, sha256=hashlib.sha256(raw_bytes).hexdigest(), tokenizer=doc["tokenizer"], items=items)


def load_eval_set(path: str | Path) -> EvalSet:
    """Read and validate an eval-set file; raises `DataError` naming the file, item and field."""
    p = Path(path)
    try:
        raw_bytes = p.read_bytes()
    except OSError as exc:
        raise DataError(str(p), f"cannot read eval set: {exc.strerror or exc}") from exc
    return parse_eval_set(str(p), raw_bytes)


def check_vocab(items: Sequence[EvalItem], vocab_size: int, path: str) -> None:
    """Fail on the first token id the model cannot embed; done at eval time, when the model is known."""
    for index, item in enumerate(items):
        for pos, tok in enumerate(item.input_ids):
            if tok >= vocab_size:
                raise DataError(
                    path,
                    f"item {item.id!r} (items[{index}]): field 'input_ids'[{pos}] is {tok}, "
                    f"outside the model's vocab of {vocab_size}",
                )
