"""Eval-set loading: the v1 format, its validation errors, and provenance."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from qualify.errors import DataError
from qualify.loss.data import FORMAT_TAG, check_vocab, load_eval_set


def _doc(n_items: int = 3) -> dict[str, Any]:
    items = []
    for i in range(n_items):
        length = 3 + random.randrange(10)
        ids = [random.randrange(1000) for _ in range(length)]
        mask = [0] + [random.randrange(2) for _ in range(length - 1)]
        mask[-1] = 1
        items.append({"id": f"q{i}", "text": f"text {i}", "input_ids": ids, "answer_mask": mask})
    return {"format": FORMAT_TAG, "tokenizer": "HuggingFaceTB/SmolLM2-135M", "items": items}


def _write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(doc))
    return path


def test_round_trip_and_sha256(tmp_path: Path) -> None:
    doc = _doc()
    path = _write(tmp_path, doc)
    es = load_eval_set(path)
    assert es.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert es.tokenizer == doc["tokenizer"] and es.path == str(path)
    assert [item.id for item in es.items] == ["q0", "q1", "q2"]
    for item, raw in zip(es.items, doc["items"], strict=True):
        assert list(item.input_ids) == raw["input_ids"]
        assert list(item.answer_mask) == raw["answer_mask"]
        assert item.num_answer_tokens == sum(raw["answer_mask"])
    assert es.num_answer_tokens == sum(sum(r["answer_mask"]) for r in doc["items"])


def _mutate(doc: dict[str, Any], index: int, **changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for key, value in changes.items():
        if value is _DROP:
            del doc["items"][index][key]
        else:
            doc["items"][index][key] = value
    return doc


_DROP = object()


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"text": _DROP}, r"item 'q1' \(items\[1\]\): missing field 'text'"),
        ({"input_ids": _DROP}, r"'q1'.*missing field 'input_ids'"),
        ({"answer_mask": [0, 1]}, r"'q1'.*'answer_mask' has 2 entries but 'input_ids' has"),
        ({"input_ids": [5, -1, 3], "answer_mask": [0, 1, 1]}, r"'q1'.*'input_ids'\[1\] is -1"),
        ({"input_ids": [5, 2.5, 3], "answer_mask": [0, 1, 1]}, r"'q1'.*'input_ids'\[1\] is 2.5"),
        ({"input_ids": [5, True, 3], "answer_mask": [0, 1, 1]}, r"'q1'.*'input_ids'\[1\] is True"),
        ({"input_ids": [5, 6, 3], "answer_mask": [0, 2, 1]}, r"'q1'.*'answer_mask'\[1\] is 2"),
        ({"input_ids": [5, 6, 3], "answer_mask": [0, 0, 0]}, r"'q1'.*marks no answer tokens"),
        ({"input_ids": [5, 6, 3], "answer_mask": [1, 0, 1]}, r"'q1'.*'answer_mask'\[0\] is 1"),
        ({"id": "q0"}, r"'q0' \(items\[1\]\): field 'id' duplicates items\[0\]"),
        ({"id": 7}, r"items\[1\]: field 'id' must be a str"),
        ({"input_ids": "1 2 3"}, r"'q1'.*field 'input_ids' must be a list"),
    ],
)
def test_item_errors_name_item_and_field(tmp_path: Path, changes: dict[str, Any], pattern: str) -> None:
    path = _write(tmp_path, _mutate(_doc(), 1, **changes))
    with pytest.raises(DataError, match=pattern) as info:
        load_eval_set(path)
    assert info.value.path == str(path)


@pytest.mark.parametrize(
    ("doc", "pattern"),
    [
        ({"format": "cartridge-qualify/eval-set/v2", "tokenizer": "m", "items": []}, "field 'format'"),
        ({"tokenizer": "m", "items": []}, "field 'format' is None"),
        ({"format": FORMAT_TAG, "items": [{}]}, "field 'tokenizer'"),
        ({"format": FORMAT_TAG, "tokenizer": "m", "items": []}, "'items' must be a non-empty list"),
        ({"format": FORMAT_TAG, "tokenizer": "m", "items": [3]}, r"items\[0\]: expected an object"),
        ([1, 2], "top level must be a JSON object"),
    ],
)
def test_file_level_errors(tmp_path: Path, doc: Any, pattern: str) -> None:
    with pytest.raises(DataError, match=pattern):
        load_eval_set(_write(tmp_path, doc))


def test_unreadable_and_invalid_json(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read"):
        load_eval_set(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": ')
    with pytest.raises(DataError, match="not valid JSON"):
        load_eval_set(bad)


def test_vocab_check_names_the_token(tmp_path: Path) -> None:
    doc = _doc()
    pos = random.randrange(len(doc["items"][2]["input_ids"]))
    doc["items"][2]["input_ids"][pos] = 1000
    es = load_eval_set(_write(tmp_path, doc))  # the vocab is unknown at load time
    check_vocab(es.items, 1001, es.path)
    with pytest.raises(DataError, match=rf"'q2' \(items\[2\]\): field 'input_ids'\[{pos}\] is 1000, outside"):
        check_vocab(es.items, 1000, es.path)
