"""End to end in vLLM 0.26 on an SM90 GPU with prefills long enough for the Gluon prefill's persistent tiles.

test_vllm_e2e.py prefills 8 questions of 48 tokens: 1,536 query rows per KV head at the small Qwen3's GQA group of
4, served by the 64 x 64 two-per-SM tile only. Here the same small Qwen3 and random 632-position cartridge get 8
questions of 1,024 tokens. The engine (in-process, as .vllm/setup.sh runs it) has them all queued before its first
step and its token budget (16,384) holds all 8,192, so one prefill step has 32,768 rows, past
cartridge_attn.heuristics.GLUON_TWO_PER_SM_MAX_ROWS. Each K16/V8 layout's record must show the dispatch's
persistent tile for that step among the prefill tiles its engine planned, and the log-probabilities of the
prefix-cached reference's tokens must stay within test_vllm_e2e.py's tolerance. A short-question engine of the same
layout and settings is the control: it plans the two-per-SM tile and not the persistent one, so an engine's warm-up
(the same in both) does not plan the persistent tile, and the long record's tile came from the long questions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _agreement_runs import LOGPROB_TOLERANCE, REFERENCE, TIE_EPS, compare_runs, generate_runs, require_vllm_host

from qualify.serve.e2e import SMALL
from qualify.serve.layouts import layout

QUESTIONS = 8
LONG, SHORT = 1024, 48  # question lengths: this file's, and test_vllm_e2e.py's default
K16V8 = ("shared-k16v8", "shared-k16v8-live-fp8")
CONTROL = "shared-k16v8"


def _tile(layout_name: str, question_len: int, impl: str) -> tuple[str, bool]:
    """The tag of the prefill tile the dispatch gives one step of all the questions, and whether it is persistent."""
    from cartridge_attn.heuristics import prefill_config

    cfg = SMALL.hf_config()
    group = cfg["num_attention_heads"] // cfg["num_key_value_heads"]
    live_v_bits = 8 if layout(layout_name).live_value_dtype == "fp8_e4m3" else 16
    tile = prefill_config(group, cfg["head_dim"], rows=QUESTIONS * question_len * group,
                          num_kv_heads=cfg["num_key_value_heads"], impl=impl, live_v_bits=live_v_bits)  # fmt: skip
    return tile.tag, tile.persistent


@pytest.mark.parametrize("layout_name", K16V8)
def test_long_questions_reach_the_persistent_tiles_and_short_ones_do_not(layout_name: str) -> None:
    # What the GPU test below relies on; were the cut to move past these rows, the questions would have to grow.
    assert _tile(layout_name, LONG, "gluon")[1], _tile(layout_name, LONG, "gluon")
    assert not _tile(layout_name, SHORT, "gluon")[1], _tile(layout_name, SHORT, "gluon")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_vllm_host()
    from cartridge_attn import default_prefill_impl

    if default_prefill_impl("cuda") != "gluon":
        pytest.fail(f"the persistent tiles are the Gluon prefill's; this host's dispatch takes the "
                    f"{default_prefill_impl('cuda')} prefill (the Gluon one needs Triton 3.6)")  # fmt: skip
    into = tmp_path_factory.mktemp("long")
    long = generate_runs((REFERENCE, *K16V8), into, ["--prompts", str(QUESTIONS), "--question-len", str(LONG)])
    short = generate_runs((CONTROL,), into / "short", ["--prompts", str(QUESTIONS), "--question-len", str(SHORT)],
                          "short-")  # fmt: skip
    return long | {f"short-{CONTROL}": short[CONTROL]}


def _prefill_tiles(doc: dict) -> set[str]:
    return {key.rsplit("/", 1)[1] for key in doc["dispatched"] if key.startswith("prefill/")}


@pytest.mark.gpu
def test_short_control_planned_no_persistent_prefill(runs: dict[str, Path]) -> None:
    doc = json.loads(runs[f"short-{CONTROL}"].read_text())
    assert doc["question_lens"] == [SHORT] * QUESTIONS, doc["question_lens"]
    tiles = _prefill_tiles(doc)
    assert _tile(CONTROL, SHORT, "gluon")[0] in tiles, doc["dispatched"]
    assert _tile(CONTROL, LONG, "gluon")[0] not in tiles, doc["dispatched"]


@pytest.mark.gpu
@pytest.mark.parametrize("layout_name", K16V8)
def test_long_prefill_served_by_the_persistent_tiles_agrees(runs: dict[str, Path], layout_name: str) -> None:
    doc = json.loads(runs[layout_name].read_text())
    assert doc["question_lens"] == [LONG] * QUESTIONS, doc["question_lens"]
    assert _tile(layout_name, LONG, "gluon")[0] in _prefill_tiles(doc), doc["dispatched"]
    result = compare_runs(runs[REFERENCE], runs[layout_name], tie_eps=TIE_EPS, logprob_tolerance=LOGPROB_TOLERANCE)
    assert result["logprobs"]["passed"], json.dumps(result["logprobs"], indent=1)
