"""qualify.serve.yes_no: BoolQ answers read from prompt log-probabilities, and the floor with its power."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from qualify.errors import QualifyError
from qualify.loss.data import load_eval_set
from qualify.serve.yes_no import answer_tokens, floor_report, yes_no_outcomes

EVAL = Path(__file__).resolve().parents[2] / "fixtures" / "fifa_world_cup" / "eval_set.json"
ITEMS = load_eval_set(EVAL).items


def _doc(wrong: set[str], *, drop_other: set[str] = frozenset(), gold_low: set[str] = frozenset()) -> dict:
    """Scores of every yes/no item: the gold answer likelier unless the item is in `wrong`; `drop_other` leaves
    the other answer out of the top-k; `gold_low` puts the gold token below the top-k as well."""
    gold = answer_tokens(ITEMS)
    pair = sorted(set(gold.values()))
    items = []
    for item_id, token in gold.items():
        other = pair[1] if token == pair[0] else pair[0]
        top = {str(100 + j): -3.0 - j for j in range(3)}  # three unrelated tokens of the top-3
        g, o = (-2.0, -0.5) if item_id in wrong else (-0.5, -2.0)
        top[str(token)] = -9.0 if item_id in gold_low else g
        if item_id not in drop_other:
            top[str(other)] = o
        items.append({"id": item_id, "gold": [top[str(token)]], "tops": [top]})
    return {"label": "x", "top_k": 3, "items": items}


def test_each_item_is_right_when_its_gold_answer_is_likelier() -> None:
    ids = list(answer_tokens(ITEMS))
    assert len(ids) == 27
    wrong = set(random.sample(ids, random.randint(1, 8)))
    out = yes_no_outcomes(_doc(wrong), ITEMS)
    assert out.ids == ids and [not c for c in out.correct] == [i in wrong for i in ids]
    assert out.accuracy == pytest.approx(1 - len(wrong) / 27) and not out.undecided


def test_an_answer_missing_from_the_top_k_is_decided_when_it_can_be() -> None:
    ids = list(answer_tokens(ITEMS))
    # The other answer is below the top-k, the gold among it: right. Both below: undecided, counted wrong.
    out = yes_no_outcomes(_doc(set(), drop_other={ids[0], ids[1]}, gold_low={ids[1]}), ITEMS)
    assert out.correct[0] and not out.correct[1] and out.undecided == [ids[1]]


def test_the_floor_on_27_items_is_underpowered_never_a_pass() -> None:
    ids = list(answer_tokens(ITEMS))
    ref = yes_no_outcomes(_doc(set(ids[:5])), ITEMS)
    same = floor_report(ref, ref)
    assert same["ratio"] == 1.0 and same["mcnemar_p"] == 1.0
    assert [f["verdict"] for f in same["floors"]] == ["INCOMPLETE", "INCOMPLETE"]
    assert all(f["power"].startswith("underpowered: n=27") for f in same["floors"])
    # Shown far below the floor: a fail, however few the items.
    bad = floor_report(ref, yes_no_outcomes(_doc(set(ids)), ITEMS))
    assert bad["accuracy"] == 0.0 and [f["verdict"] for f in bad["floors"]] == ["FAIL", "FAIL"]
    assert bad["discordant"] == {"reference_only": 22, "candidate_only": 0} and bad["mcnemar_p"] < 1e-5


def test_outcomes_of_other_items_are_refused() -> None:
    ref = yes_no_outcomes(_doc(set()), ITEMS)
    doc = _doc(set())
    doc["items"] = doc["items"][1:]
    with pytest.raises(QualifyError, match="was not scored"):
        yes_no_outcomes(doc, ITEMS)
    no_k = _doc(set(), drop_other={"boolq-00"})
    del no_k["top_k"]
    with pytest.raises(QualifyError, match="no top_k recorded"):
        yes_no_outcomes(no_k, ITEMS)
    with pytest.raises(QualifyError, match="two tokens"):
        answer_tokens([i for i in ITEMS if i.id == "boolq-00"])
    assert ref.accuracy == 1.0


def test_the_command_reads_recorded_scores(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import json

    from qualify.cli import main

    (tmp_path / "ref.json").write_text(json.dumps(_doc(set())))
    (tmp_path / "lay.json").write_text(json.dumps(_doc({"boolq-03"})))
    assert main(["serve-loss", "boolq", str(tmp_path / "ref.json"), str(tmp_path / "lay.json"), "--eval-set",
                 str(EVAL)]) == 0  # fmt: skip
    row = json.loads(capsys.readouterr().out)[str(tmp_path / "lay.json")]
    assert row["accuracy"] == pytest.approx(26 / 27) and row["discordant"]["reference_only"] == 1
    assert main(["serve-loss", "boolq", str(tmp_path / "none.json"), str(tmp_path / "lay.json"), "--eval-set",
                 str(EVAL)]) == 2  # fmt: skip
    assert capsys.readouterr().err.startswith("serve-loss boolq:")
