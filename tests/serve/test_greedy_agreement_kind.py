"""Gate kind `greedy_agreement` on CPU: the generation processes are stand-ins that copy prepared records into place,
so what is checked is which processes start, the rule (only an exact tie excuses a divergence), the log-probability
checks, the vacuous case and lint."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from qualify.cli import main
from qualify.kinds.greedy_agreement import runner

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "fifa_world_cup"
SMOLLM2 = {"architectures": ["LlamaForCausalLM"], "hidden_size": 576, "num_attention_heads": 9,
           "num_key_value_heads": 3, "num_hidden_layers": 30, "vocab_size": 49152}  # fmt: skip
PROMPTS, TOKENS = 4, 16


def _reference(rng: random.Random) -> tuple[list[dict], dict[tuple[int, int], float]]:
    """Records of PROMPTS x TOKENS greedy tokens; the reference's top-2 margin at each position (a few exact ties
    and one-BF16-step margins among clear ones)."""
    records, margins = [], {}
    for p in range(PROMPTS):
        tokens, tops = [], []
        for pos in range(TOKENS):
            tok, other = rng.randrange(100, 5000), rng.randrange(5000, 9000)
            margin = rng.choice([0.0, 0.125, 1.5, 2.0, 3.0])
            margins[(p, pos)] = margin
            tokens.append(tok)
            tops.append({str(tok): -0.5, str(other): -0.5 - margin})
        records.append({"tokens": tokens, "top_logprobs": tops})
    return records, margins


def _diverge(records: list[dict], prompt: int, position: int) -> list[dict]:
    out = json.loads(json.dumps(records))
    rec = out[prompt]
    rec["tokens"][position] = 1 + rec["tokens"][position] % 99  # a token the reference did not take
    return out


def _shift(records: list[dict], by: float) -> list[dict]:
    out = json.loads(json.dumps(records))
    for rec in out:
        rec["top_logprobs"] = [{t: v - by for t, v in top.items()} for top in rec["top_logprobs"]]
    return out


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict:
    """Each layout's prepared records (set by the test), and the (layout, eager) pairs started."""
    rng = random.Random(random.randrange(2**32))
    reference, margins = _reference(rng)
    state: dict = {"records": {("bf16-prefix-cached", False): reference}, "started": [], "margins": margins,
                   "reference": reference}  # fmt: skip

    def command(layout: str, eager: bool, served: object, out: Path, memory_share: float) -> list[str]:
        state["started"].append((layout, eager))
        doc = {"layout": layout, "description": layout, "records": state["records"][(layout, eager)],
               "cartridge_sha256": "c" * 64, "block_size": 16,
               "cartridge_positions_cached": [112] * PROMPTS}  # fmt: skip
        prepared = tmp_path / f"prepared-{len(state['started'])}.json"
        prepared.write_text(json.dumps(doc))
        return [sys.executable, "-c", "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])", str(prepared),
                str(out)]  # fmt: skip

    monkeypatch.setattr(runner, "generate_command", command)
    return state


def _where(margins: dict[tuple[int, int], float], margin: float) -> tuple[int, int]:
    return random.choice(sorted(k for k, m in margins.items() if m == margin))


def _gate(tmp_path: Path, candidates: str) -> Path:
    model = tmp_path / "smollm2"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(SMOLLM2))
    p = tmp_path / "agree.yaml"
    p.write_text(f"""
suite: agreement-test
version: 1
workloads:
  w:
    model: {{source: path, path: {model}}}
    cartridges: {{run1: {FIXTURES / "run1.pt"}}}
    eval_set: {FIXTURES / "eval_set.json"}
gates:
  - id: agree
    kind: greedy_agreement
    workload: w
    checkpoint: run1
    prompts: {PROMPTS}
    max_tokens: {TOKENS}
    engines_at_once: 3
    min_compared_fraction: 0.25
    candidates:
{candidates}
""")
    return p


def _run(tmp_path: Path, candidates: str) -> tuple[int, dict]:
    out = tmp_path / "out"
    rc = main(["run", str(_gate(tmp_path, candidates)), "--out", str(out), "--name", "r"])
    return rc, json.loads((out / "r.json").read_text())["items"][0]


def test_identical_tokens_and_an_exact_tie_pass(tmp_path: Path, setup: dict) -> None:
    ref = setup["reference"]
    tie = _where(setup["margins"], 0.0)
    setup["records"][("bf16-inject", False)] = ref
    setup["records"][("shared-k16v16", False)] = _diverge(ref, *tie)
    rc, item = _run(tmp_path, "      - {id: inject, layout: bf16-inject}\n"
                              "      - {id: shared, layout: shared-k16v16, max_mean_logprob_diff: 0.02}")  # fmt: skip
    assert rc == 0 and item["status"] == "passed", item["reason"]
    assert sorted(setup["started"]) == [("bf16-inject", False), ("bf16-prefix-cached", False),
                                        ("shared-k16v16", False)]  # fmt: skip
    shared = item["measurements"]["candidates"][1]
    assert [(d["prompt"], d["position"], d["tie"]) for d in shared["ties"]] == [(*tie, True)]
    assert shared["failures"] == [] and shared["identical_prompts"] == PROMPTS - 1
    assert shared["compared_tokens"] == PROMPTS * TOKENS - (TOKENS - 1 - tie[1])
    counts = item["measurements"]["reference_margins"]
    assert counts["positions"] == PROMPTS * TOKENS
    assert counts["ties"] == sum(m == 0.0 for m in setup["margins"].values())


def test_a_divergence_at_one_bf16_step_fails_and_is_reported_with_its_margin(tmp_path: Path, setup: dict) -> None:
    where = _where(setup["margins"], 0.125)
    setup["records"][("shared-k16v16", False)] = _diverge(setup["reference"], *where)
    rc, item = _run(tmp_path, "      - {id: shared, layout: shared-k16v16}")
    assert rc == 1 and item["status"] == "failed"
    failure = item["measurements"]["candidates"][0]["failures"][0]
    assert (failure["prompt"], failure["position"], failure["reference_margin"]) == (*where, 0.125)
    check = item["checks"][0]
    assert check["observed"] == 1 and f"prompt {where[0]} at {where[1]}, reference margin 0.125" in check["statistic"]


def test_log_probabilities_beyond_their_tolerance_fail_without_token_identity(tmp_path: Path, setup: dict) -> None:
    diverged = _diverge(setup["reference"], *_where(setup["margins"], 1.5))
    setup["records"][("shared-k16v8", False)] = _shift(diverged, 0.05)
    rc, item = _run(tmp_path, "      - {id: v8, layout: shared-k16v8, token_identity: false, "
                              "max_mean_logprob_diff: 0.02}")  # fmt: skip
    assert rc == 1 and item["status"] == "failed"
    checks = {c["name"]: c for c in item["checks"]}
    assert len(checks) == 2 and not any("identical" in name for name in checks)
    mean = next(c for name, c in checks.items() if "mean" in name)
    assert mean["observed"] == pytest.approx(0.05) and not mean["passed"]
    # The divergence is recorded although token identity is not asked of this candidate.
    assert len(item["measurements"]["candidates"][0]["failures"]) == 1


def test_ties_that_end_every_comparison_early_leave_the_item_incomplete(tmp_path: Path, setup: dict) -> None:
    ref = json.loads(json.dumps(setup["reference"]))
    for rec in ref:  # every prompt's second token an exact tie, and the candidate takes the other one there
        top = rec["top_logprobs"][1]
        first = next(iter(top))
        rec["top_logprobs"][1] = {first: -0.5, "9999": -0.5}
    setup["records"][("bf16-prefix-cached", False)] = ref
    cand = json.loads(json.dumps(ref))
    for rec in cand:
        rec["tokens"][1] = 9999
    setup["records"][("shared-k16v16", False)] = cand
    rc, item = _run(tmp_path, "      - {id: shared, layout: shared-k16v16}")
    assert rc == 0 and item["status"] == "incomplete" and "vacuous" in item["reason"], item["reason"]
    assert item["measurements"]["candidates"][0]["compared_tokens"] == 2 * PROMPTS


@pytest.mark.parametrize(
    ("candidates", "message"),
    [
        ("      - {id: a, layout: no-such-layout}", "unknown serving layout 'no-such-layout'"),
        ("      - {id: a, layout: bf16-prefix-cached}", "the reference itself, served the same way"),
        ("      - {id: a, layout: shared-k16v8, token_identity: false}", "nothing could fail"),
        ("      - {id: a, layout: shared-k16v8}\n      - {id: a, layout: shared-k16v16}", "appears twice"),
    ],
)
def test_lint_refuses_candidates_that_show_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture, candidates: str, message: str
) -> None:
    assert main(["lint", str(_gate(tmp_path, candidates))]) == 2
    assert message in capsys.readouterr().err
