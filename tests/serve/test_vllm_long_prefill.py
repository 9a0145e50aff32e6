"""End to end in vLLM 0.26 on an SM90 GPU with prefills long enough for the Gluon prefill's persistent tiles.

The agreement runs of test_vllm_e2e.py prefill 8 questions of 48 tokens (1,536 query rows per KV head at the small
Qwen3's GQA group of 4), so they serve the 64 x 64 two-per-SM tile only. Here the same small Qwen3 and random
632-position cartridge get 8 questions of 1,024 tokens, which vLLM schedules as one prefill of 8,192 tokens
(32,768 rows, past cartridge_attn.heuristics.GLUON_TWO_PER_SM_MAX_ROWS): the dispatch's persistent 128 x 128 tiles,
three stages over BF16 live values and two over FP8 ones. Each K16/V8 layout's record must show that tile among
the variants its engine planned, and the log-probabilities of the prefix-cached reference's tokens must stay within
the tolerance test_vllm_e2e.py holds the short ones to.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _agreement_runs import LOGPROB_TOLERANCE, REFERENCE, TIE_EPS, compare_runs, generate_runs, require_vllm_host

pytestmark = pytest.mark.gpu
QUESTIONS = 8
QUESTION_LEN = 1024
# The small Qwen3 (fixtures/qwen3_small): 32 query heads over 8 KV heads of head_dim 128.
GROUP, NUM_KV_HEADS, HEAD_DIM = 4, 8, 128
LIVE_V_BITS = {"shared-k16v8": 16, "shared-k16v8-live-fp8": 8}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_vllm_host()
    extra = ["--prompts", str(QUESTIONS), "--question-len", str(QUESTION_LEN)]
    return generate_runs((REFERENCE, *LIVE_V_BITS), tmp_path_factory.mktemp("long"), extra, "long-")


def _persistent_tile(live_v_bits: int) -> str:
    """The tag of the prefill tile the dispatch gives one step of all the questions."""
    from cartridge_attn import default_prefill_impl
    from cartridge_attn.heuristics import prefill_config

    rows = QUESTIONS * QUESTION_LEN * GROUP
    cfg = prefill_config(GROUP, HEAD_DIM, rows=rows, num_kv_heads=NUM_KV_HEADS, impl=default_prefill_impl("cuda"),
                         live_v_bits=live_v_bits)  # fmt: skip
    # Guards what this file is for: were the cut to move past these rows, the questions would have to grow with it.
    assert cfg.persistent, f"{rows} rows no longer reach the persistent tiles: {cfg.tag}"
    return cfg.tag


@pytest.mark.parametrize("layout", sorted(LIVE_V_BITS))
def test_long_prefill_served_by_the_persistent_tiles_agrees(runs: dict[str, Path], layout: str) -> None:
    doc = json.loads(runs[layout].read_text())
    assert doc["question_lens"] == [QUESTION_LEN] * QUESTIONS, doc["question_lens"]
    tile = _persistent_tile(LIVE_V_BITS[layout])
    prefills = [key for key in doc["dispatched"] if key.startswith("prefill/")]
    assert any(key.endswith(f"/{tile}") for key in prefills), (tile, prefills)
    result = compare_runs(runs[REFERENCE], runs[layout], tie_eps=TIE_EPS, logprob_tolerance=LOGPROB_TOLERANCE,
                          prefix="long-")  # fmt: skip
    assert result["logprobs"]["passed"], json.dumps(result["logprobs"], indent=1)
