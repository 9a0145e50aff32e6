"""plan() / run() validation: what the specialization does not cover is rejected, with a clear message."""

from __future__ import annotations

import cartridge_attn
import pytest
import torch
from _cartridge_attn_check import assert_matches, run_fused
from cartridge_attn import (
    CartridgeAttention,
    NotPlannedError,
    UnsupportedArchitectureError,
    UnsupportedLayoutError,
    default_prefill_impl,
    kernel_identity,
    random_problem,
)
from cartridge_attn import _kernel as K
from cartridge_attn import api as api_mod

QWEN = {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128, "page_size": 8}


def _table(device: torch.device, q_lens=(1, 1), pages=(2, 1), last=(8, 3)):
    qo = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    kvp = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32, device=device)
    idx = torch.arange(int(kvp[-1]), dtype=torch.int32, device=device)
    return qo, kvp, idx, torch.tensor(last, dtype=torch.int32, device=device)


def test_cartridge_length_must_be_page_multiple(kernel_device: torch.device) -> None:
    attn = CartridgeAttention()
    plan = attn.plan(*_table(kernel_device), cartridge_len=632, **QWEN)  # 79 pages of 8: accepted
    assert plan.cartridge_len == 632 and plan.mode == "decode"
    with pytest.raises(
        UnsupportedLayoutError, match=r"cartridge_len: expected a positive multiple of page_size=8.*got 633"
    ):
        attn.plan(*_table(kernel_device), cartridge_len=633, **QWEN)
    with pytest.raises(UnsupportedLayoutError, match="cartridge_len"):
        attn.plan(*_table(kernel_device), cartridge_len=0, **QWEN)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"head_dim": 96}, r"head_dim: expected one of \(64, 128\), got 96"),
        ({"page_size": 32, "cartridge_len": 640}, r"page_size: expected one of \(8, 16\), got 32"),
        ({"num_qo_heads": 136}, r"GQA group size: expected one of .*got 17"),
        ({"kv_layout": "HND"}, r"kv_layout: expected 'NHD'.*got 'HND'"),
        (
            {"cartridge_k_dtype": torch.float8_e4m3fn},
            r"cartridge K dtype: expected bfloat16.*FP8 keys are not supported",
        ),
        ({"live_k_dtype": torch.float8_e4m3fn}, r"live K dtype: expected bfloat16.*FP8 keys"),
        ({"q_dtype": torch.float32}, r"q dtype: expected bfloat16 or float16, got 'float32'"),
        ({"cartridge_v_dtype": torch.float16}, r"cartridge V dtype: expected float8_e4m3fn or bfloat16, got 'float16'"),
        ({"live_v_dtype": torch.float8_e5m2}, r"live V dtype"),
    ],
)
def test_plan_rejects_unsupported(kernel_device: torch.device, kwargs: dict, pattern: str) -> None:
    args = {**QWEN, "cartridge_len": 632, **kwargs}
    with pytest.raises(UnsupportedLayoutError, match=pattern):
        CartridgeAttention().plan(*_table(kernel_device), **args)


def test_zero_live_tokens_rejected(kernel_device: torch.device) -> None:
    with pytest.raises(UnsupportedLayoutError, match=r"live tokens of request 1: expected at least 1"):
        CartridgeAttention().plan(*_table(kernel_device, pages=(2, 0), last=(8, 1)), cartridge_len=632, **QWEN)
    with pytest.raises(UnsupportedLayoutError, match=r"kv_last_page_len\[1\]: expected in \[1, 8\], got 0"):
        CartridgeAttention().plan(*_table(kernel_device, last=(8, 0)), cartridge_len=632, **QWEN)


def test_more_queries_than_live_tokens_rejected(kernel_device: torch.device) -> None:
    with pytest.raises(UnsupportedLayoutError, match="query length <= live length"):
        CartridgeAttention().plan(*_table(kernel_device, q_lens=(1, 4), last=(8, 3)), cartridge_len=632, **QWEN)
    with pytest.raises(UnsupportedLayoutError, match="mode='decode'"):
        CartridgeAttention().plan(*_table(kernel_device, q_lens=(1, 2)), cartridge_len=632, mode="decode", **QWEN)


def test_run_checks_tensors_against_plan(kernel_device: torch.device) -> None:
    pr = random_problem([1, 1], [9, 3], cartridge_len=16, device=kernel_device)
    attn = CartridgeAttention()
    with pytest.raises(NotPlannedError):
        attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv)
    attn.plan(*pr.page_table(), **pr.plan_kwargs())
    with pytest.raises(
        UnsupportedLayoutError, match=r"cartridge K dtype: expected bfloat16 \(FP8 keys are not supported\)"
    ):
        attn.run(pr.q, pr.cartridge_k.to(torch.float8_e4m3fn), pr.cartridge_v, pr.paged_kv)
    with pytest.raises(UnsupportedLayoutError, match=r"cartridge K shape: expected \(16, 2, 64\), got \(15, 2, 64\)"):
        attn.run(pr.q, pr.cartridge_k[:15], pr.cartridge_v[:15], pr.paged_kv)
    with pytest.raises(UnsupportedLayoutError, match="live V pages dtype"):
        attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, (pr.live_k, pr.live_v.to(torch.float8_e4m3fn)))
    with pytest.raises(UnsupportedLayoutError, match="live_v_scale: expected None"):
        attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, live_v_scale=torch.ones(2, device=kernel_device))
    with pytest.raises(UnsupportedLayoutError, match="kv_indices: expected page numbers < num_pages"):
        attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, (pr.live_k[:1], pr.live_v[:1]))
    hnd = pr.live_k.transpose(1, 2)  # (pages, H, P, D): an HND cache is not silently misread
    with pytest.raises(UnsupportedLayoutError, match="live K pages shape"):
        attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, (hnd, pr.live_v.transpose(1, 2)))
    with pytest.raises(UnsupportedLayoutError, match="out dtype"):
        attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=torch.empty_like(pr.q, dtype=torch.float32))


def test_architecture_outside_envelope_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(K, "INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    with pytest.raises(
        UnsupportedArchitectureError, match=r"compute capability 8.0 is outside the qualified envelope \['9.0'\]"
    ):
        api_mod.check_device(torch.device("cuda", 0))
    api_mod.check_device(torch.device("cuda", 0), allow_unqualified_arch=True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    api_mod.check_device(torch.device("cuda", 0))
    with pytest.raises(UnsupportedArchitectureError, match="TRITON_INTERPRET=1"):
        api_mod.check_device(torch.device("cpu"))


def test_qualified_envelope_is_stated() -> None:
    assert cartridge_attn.QUALIFIED_ARCHS == ((9, 0),)
    assert UnsupportedLayoutError.__mro__[1].__mro__[1] is ValueError


def test_package_does_not_import_qualify() -> None:
    import os
    import subprocess
    import sys

    src = os.path.dirname(os.path.dirname(cartridge_attn.__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    code = (
        "import sys, cartridge_attn; assert hasattr(cartridge_attn, 'CartridgeAttention'); "
        "sys.exit(1 if any(m == 'qualify' or m.startswith('qualify.') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False, env=env).returncode == 0


def test_identity_without_launch() -> None:
    ident = kernel_identity()
    assert len(ident["source_sha256"]) == 64 and ident["triton_version"]


@pytest.mark.parametrize("live_v", [torch.bfloat16, torch.float8_e4m3fn], ids=["live16", "live8"])
@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_the_serving_plugins_interleaved_pages_match_the_reference(
    kernel_device: torch.device, live_v: torch.dtype, mode: str
) -> None:
    # One K-then-V row per token and head, as the vLLM plugin's cache holds them (FP8 values in the room of D / 2
    # BF16 ones): the dispatch's prefill (on SM90 the Gluon kernel, reading heads 1.5 D or 2 D apart) and decode.
    q_lens = [1, 1, 1] if mode == "decode" else [5, 1, 12]
    pr = random_problem(q_lens, [9, 20, 12], live_v_dtype=live_v, interleaved=True, device=kernel_device)
    assert pr.live_k.stride(2) > pr.live_k.shape[3]
    pr.poison_free_slots()
    o = run_fused(pr)
    assert o.attn.plan_info.mode == mode
    assert o.attn.plan_info.config.impl == ("triton" if mode == "decode" else default_prefill_impl(kernel_device))
    assert_matches(o)
