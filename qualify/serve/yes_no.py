"""Yes/no questions answered behind the cartridge, from the serving path's prompt log-probabilities.

The eval set's BoolQ items (`boolq-*`: a question about the document, then the gold "Yes" or "No") are scored
by `qualify.serve.prompt_scores` like every other item; an item is answered correctly when the gold answer token
is more likely than the other one at the first answer position. Both tokens are read from the items themselves
(the first answer tokens of the yes/no items), so no tokenizer is needed. vLLM returns the top-k and the gold
token; when the other answer is not among them it is less likely than all of the top-k, so the item is decided
whenever the gold token is among the top-k too, and counted wrong (and reported) otherwise.

`floor_report` is the accuracy floor of the gate kind, on these items: the layout's accuracy against the
reference's, paired (McNemar's exact test, a paired bootstrap CI of the ratio) with the power statement per
floor. An underpowered floor is never a pass: unless the CI shows the layout below it (FAIL), its verdict is
INCOMPLETE with the power statement as its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qualify.errors import DataError
from qualify.loss.data import EvalItem

PREFIX = "boolq-"


@dataclass(frozen=True)
class YesNoOutcomes:
    ids: list[str]
    correct: list[bool]
    undecided: list[str]  # counted wrong: neither answer's order was known from the top-k

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / len(self.correct)


def answer_tokens(items: Sequence[EvalItem], prefix: str = PREFIX) -> dict[str, int]:
    """Each yes/no item's gold answer token (its first answer token); the items must use exactly two."""
    gold = {i.id: i.input_ids[i.answer_mask.index(1)] for i in items if i.id.startswith(prefix) and 1 in i.answer_mask}
    if len(set(gold.values())) != 2:
        raise DataError(prefix + "*", f"yes/no items must answer with two tokens, found {sorted(set(gold.values()))}")
    return gold


def yes_no_outcomes(doc: dict[str, Any], items: Sequence[EvalItem], prefix: str = PREFIX) -> YesNoOutcomes:
    gold = answer_tokens(items, prefix)
    pair = sorted(set(gold.values()))
    scored = {i["id"]: i for i in doc["items"]}
    ids, correct, undecided = [], [], []
    for item_id, token in gold.items():
        if item_id not in scored:
            raise DataError(str(doc.get("label", "scores")), f"item {item_id} was not scored")
        top = {int(t): float(v) for t, v in scored[item_id]["tops"][0].items()}
        other = pair[1] if token == pair[0] else pair[0]
        if other in top:
            ok = top[token] > top[other]
        else:
            if not doc.get("top_k"):
                raise DataError(
                    str(doc.get("label", "scores")), "no top_k recorded: the other answer's order is unknown"
                )
            k = int(doc["top_k"])
            best = sorted(top.values(), reverse=True)[:k]
            ok = top[token] >= best[-1]
            if not ok:
                undecided.append(item_id)
        ids.append(item_id)
        correct.append(bool(ok))
    return YesNoOutcomes(ids, correct, undecided)


def floor_report(
    reference: YesNoOutcomes, candidate: YesNoOutcomes, *, floors: Sequence[float] = (0.99, 0.999),
    alpha: float = 0.05, beta: float = 0.2, seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """The candidate's accuracy as a fraction of the reference's on the same items, per floor with its power."""
    from qualify.stats.paired import discordance, mcnemar_exact_p, score_ratio_ci
    from qualify.stats.power import power_statement

    if reference.ids != candidate.ids:
        raise DataError("yes/no outcomes", "the candidate was not scored on the reference's items")
    ref, cand = np.array(reference.correct), np.array(candidate.correct)
    d = discordance(ref, cand)
    ci = score_ratio_ci(ref, cand, np.random.default_rng(seed))
    rows = []
    for floor in floors:
        power = power_statement(len(ref), alpha, beta, reference.accuracy, floor)
        # Shown below the floor fails however few the items; otherwise too few items show nothing.
        if ci.high < floor:
            verdict, decided_on = "FAIL", ci.high
        elif power.underpowered:
            verdict, decided_on = "INCOMPLETE", ci.low
        else:
            verdict, decided_on = ("PASS" if ci.low >= floor else "FAIL"), ci.low
        rows.append({"floor": floor, "verdict": verdict, "power": power.sentence(), "decided_on": decided_on})
    return {
        "items": len(ref),
        "reference_accuracy": reference.accuracy,
        "accuracy": candidate.accuracy,
        "ratio": ci.estimate,
        "ci": [ci.low, ci.high],
        "mcnemar_p": mcnemar_exact_p(d.ref_only, d.cand_only),
        "discordant": {"reference_only": d.ref_only, "candidate_only": d.cand_only},
        "undecided": {"reference": reference.undecided, "candidate": candidate.undecided},
        "floors": rows,
    }
