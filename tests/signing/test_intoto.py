from __future__ import annotations

import json

import pytest

from qualify.errors import SigningError
from qualify.signing.intoto import PREDICATE_TYPE, STATEMENT_TYPE, Statement, Subject, build_statement


def _subject() -> Subject:
    return Subject.for_bytes("cartridge.safetensors", b"weights")


def test_statement_bytes_are_canonical():
    payload = build_statement([_subject()], {"b": 1, "a": ["é", 2.5, None]})
    assert payload == json.dumps(json.loads(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )
    assert b" " not in payload and "é".encode() in payload
    doc = json.loads(payload)
    assert doc["_type"] == STATEMENT_TYPE and doc["predicateType"] == PREDICATE_TYPE
    assert doc["subject"] == [{"name": "cartridge.safetensors", "digest": {"sha256": _subject().digest.sha256}}]


def test_same_report_gives_same_bytes_whatever_the_key_order():
    assert build_statement([_subject()], {"x": 1, "y": 2}) == build_statement([_subject()], {"y": 2, "x": 1})


def test_at_least_one_subject_is_required():
    with pytest.raises(SigningError, match="subject"):
        build_statement([], {"x": 1})


def test_nan_in_report_is_refused():
    with pytest.raises(SigningError, match="NaN"):
        build_statement([_subject()], {"loss": float("nan")})


def test_value_without_json_form_is_refused():
    with pytest.raises(SigningError, match="no JSON form"):
        build_statement([_subject()], {"when": object()})


def test_subject_digest_must_be_lowercase_sha256_hex():
    with pytest.raises(ValueError):
        Subject.model_validate({"name": "x", "digest": {"sha256": "ABC"}})
    with pytest.raises(ValueError):
        Subject.model_validate({"name": "x", "digest": {"sha256": "0" * 64, "md5": "0" * 32}})


def test_statement_parsing_is_strict():
    good = json.loads(build_statement([_subject()], {"x": 1}))
    Statement.model_validate(good)
    for bad in (
        {**good, "extra": 1},
        {**good, "_type": "https://in-toto.io/Statement/v0.1"},
        {**good, "predicateType": "https://slsa.dev/provenance/v1"},
        {**good, "subject": []},
    ):
        with pytest.raises(ValueError):
            Statement.model_validate(bad)


def test_subject_for_file_names_the_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"gguf")
    assert Subject.for_file(path) == Subject.for_bytes("model.gguf", b"gguf")
    with pytest.raises(SigningError, match=r"missing\.gguf"):
        Subject.for_file(tmp_path / "missing.gguf")
