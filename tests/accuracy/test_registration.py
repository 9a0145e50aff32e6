from __future__ import annotations

import pytest

from qualify.accuracy.registration import vllm_kv_cache_dtype, vllm_model_args
from qualify.errors import QualifyError


def test_lm_eval_resolves_the_registered_model(tiny_lm) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("lm_eval")
    from lm_eval.api.registry import get_model

    from qualify.accuracy.lm import KVLayoutLM
    from qualify.accuracy.registration import LM_EVAL_MODEL_NAME, register_lm_eval_model

    register_lm_eval_model()
    register_lm_eval_model()  # idempotent
    cls = get_model(LM_EVAL_MODEL_NAME)
    assert cls is KVLayoutLM
    lm = cls.create_from_arg_obj(
        {"pretrained": tiny_lm.model, "tokenizer": tiny_lm.tokenizer, "layout": "k8v8"}, {"batch_size": 4}
    )
    assert lm.layout_label == "K8/V8"


def test_vllm_pass_through_maps_only_uniform_layouts() -> None:
    assert vllm_kv_cache_dtype("K16/V16") == "auto"
    assert vllm_model_args("/m", "K8/V8", max_model_len=4096) == {
        "pretrained": "/m",
        "kv_cache_dtype": "fp8_e4m3",
        "max_model_len": 4096,
    }
    for mixed in ("K16/V8", "K8/V16"):
        with pytest.raises(QualifyError, match="quantizes keys and values together"):
            vllm_kv_cache_dtype(mixed)
