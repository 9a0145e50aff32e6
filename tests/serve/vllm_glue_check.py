"""The vLLM-side glue of qualify.serve against vLLM 0.26's real classes: compiled on CUDA, interpreted on CPU.

Run as a script (test_vllm_glue.py does): `vllm_glue_check.py SEED cuda` runs the compiled kernel on the GPU, what
ships; `vllm_glue_check.py SEED cpu` needs TRITON_INTERPRET=1 set before triton's first import.

* shared mode: `CartridgeMetadataBuilder` + `CartridgeAttentionImpl` serve a prefill step then a decode step
  of two requests through a vLLM-layout paged cache (logical (blocks, H_kv, block, 2 * D), NHD in memory), and
  every output matches a dense fp32 reference over cartridge + all live tokens (BF16 and FP8 live V); on a GPU the
  steps after the first launch directly (the default), and the backend's note says so; its notes also name the
  cache layout vLLM gave (NHD), the order the kernels read and the dispatch's own prefill;
* inject mode: `CartridgeInjectConnector` claims exactly the placeholder run, refuses a partial one, and
  copies the cartridge into the request's slots of every layer, touching nothing else.

Exits non-zero with a message on the first mismatch.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch
from vllm.config.compilation import CUDAGraphMode

H_Q, H_KV, D, T_C, BS, LAYERS = 4, 2, 64, 16, 8, 2
MAX_MODEL_LEN = 64
NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]


def vllm_config(mode: str, path: Path, live_v: str = "bfloat16") -> SimpleNamespace:
    arch = "CartridgeQwen3ForCausalLM" if mode == "shared" else "Qwen3ForCausalLM"
    return SimpleNamespace(
        model_config=SimpleNamespace(
            hf_config=SimpleNamespace(
                architectures=[arch], num_hidden_layers=LAYERS, num_attention_heads=H_Q, num_key_value_heads=H_KV
            ),
            get_head_size=lambda: D,
            dtype=torch.bfloat16,
            disable_cascade_attn=mode == "shared",
            max_model_len=MAX_MODEL_LEN,
        ),
        scheduler_config=SimpleNamespace(max_num_seqs=4),
        compilation_config=SimpleNamespace(
            cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE, max_cudagraph_capture_size=4
        ),
        cache_config=SimpleNamespace(block_size=BS, cache_dtype="auto", enable_prefix_caching=False),
        attention_config=SimpleNamespace(backend=SimpleNamespace(name="CUSTOM") if mode == "shared" else None),
        kv_transfer_config=(
            SimpleNamespace(kv_connector="CartridgeInjectConnector", kv_role="kv_both", kv_connector_extra_config={})
            if mode == "inject"
            else None
        ),
        speculative_config=None,
        additional_config={
            "cartridge": {"mode": mode, "path": str(path), "cartridge_len": T_C, "live_value_dtype": live_v}
        },
    )


def write_cartridge(path: Path, gen: torch.Generator) -> None:
    from qualify.cartridge.io import save_cartridge
    from qualify.cartridge.types import Cartridge

    keys = tuple(torch.randn(T_C, H_KV, D, generator=gen).bfloat16() for _ in range(LAYERS))
    values = tuple(torch.randn(T_C, H_KV, D, generator=gen).bfloat16() for _ in range(LAYERS))
    save_cartridge(Cartridge(keys=keys, values=values, frozen_tokens=1, source="test"), path)


def fail(msg: str) -> None:
    print(f"FAIL: {msg}")
    sys.exit(1)


def check_shared(tmp: Path, live_v: str, gen: torch.Generator, dev: torch.device) -> None:
    from cartridge_attn import default_prefill_impl
    from vllm.v1.attention.backend import CommonAttentionMetadata
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    from qualify.cartridge.io import load_cartridge
    from qualify.errors import QualifyError
    from qualify.serve.backend import (
        CartridgeAttentionBackend,
        CartridgeAttentionBackendLiveV8,
        CartridgeAttentionImpl,
        CartridgeMetadataBuilder,
    )
    from qualify.serve.config import live_v_width
    from qualify.serve.dispatch_log import (
        DISPATCH_LOG_ENV,
        KV_CACHE_LAYOUT_NOTE,
        KV_CACHE_ORDER_NOTE,
        PREFILL_IMPL_NOTE,
        direct_launches_seen,
        read_dispatch_notes,
    )

    # The fused backend notes its first direct launch here (the default launch path): the compiled kernel on a GPU
    # gives one from the second step on; the interpreter compiles nothing, so none.
    dispatch = tmp / f"dispatch-{live_v}.log"
    os.environ[DISPATCH_LOG_ENV] = str(dispatch)
    path = tmp / f"shared-{live_v}.safetensors"
    write_cartridge(path, gen)
    cart = load_cartridge(path)
    cfg = vllm_config("shared", path, live_v)
    # The pages vLLM allocates for this engine: K16/V8 pages (V in D FP8 bytes) with FP8 live V.
    spec = FullAttentionSpec(block_size=BS, num_kv_heads=H_KV, head_size=D, head_size_v=live_v_width(D, live_v),
                             dtype=torch.bfloat16)  # fmt: skip
    if live_v == "fp8_e4m3" and spec.page_size_bytes * 4 != BS * H_KV * 2 * D * 2 * 3:
        fail(f"K16/V8 pages of {spec.page_size_bytes} bytes are not 3/4 of a BF16 page")
    builder = CartridgeMetadataBuilder(spec, list(reversed(NAMES)), cfg, dev)
    if builder.prefill_impl is not None:
        fail(f"over vLLM's NHD cache the backend must leave the prefill to the dispatch, not {builder.prefill_impl!r}")
    wrong = FullAttentionSpec(block_size=BS, num_kv_heads=H_KV, head_size=D, head_size_v=D + D // 2 - spec.head_size_v,
                              dtype=torch.bfloat16)  # fmt: skip
    try:
        CartridgeMetadataBuilder(wrong, NAMES, cfg, dev)
        fail(f"a cache spec with live V of {wrong.head_size_v} elements must be refused for {live_v} live V")
    except QualifyError:
        pass
    # One impl per layer, as vLLM makes them: each checks its layer's operands once and reuses them every step.
    impls = [CartridgeAttentionImpl(H_Q, D, 1 / math.sqrt(D), H_KV) for _ in NAMES]
    bindings: list = []
    n_blocks = 12
    width = D + spec.head_size_v
    shape = CartridgeAttentionBackendLiveV8 if live_v == "fp8_e4m3" else CartridgeAttentionBackend
    if shape.get_kv_cache_shape(n_blocks, BS, H_KV, D) != (n_blocks, H_KV, BS, width):
        fail(f"{shape.__name__} cache shape is not (blocks, H_kv, block, {width})")
    raw = [torch.full((n_blocks, BS, H_KV, width), float("nan"), dtype=torch.bfloat16, device=dev) for _ in NAMES]
    kv = [r.permute(0, 2, 1, 3) for r in raw]  # logical (blocks, H_kv, block, 2D), NHD in memory
    # Rows 2 and 3: padding requests of a graph replay (vLLM points them at its null block 0).
    table = torch.tensor([[7, 2, 0, 0], [4, 9, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.int32, device=dev)
    live_k = [[[] for _ in range(2)] for _ in NAMES]
    live_v_hist = [[[] for _ in range(2)] for _ in NAMES]
    # (query lengths, live tokens before the step, padding requests): a prefill, a decode step, and a decode step
    # padded to a captured graph's batch of 4 as a full CUDA graph replay gives it.
    for q_lens, start, pad in (([5, 3], [0, 0], 0), ([1, 1], [5, 3], 0), ([1, 1], [6, 4], 2)):
        seq = [s + q for s, q in zip(start, q_lens, strict=True)]
        qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
        slots = []
        for b, (s, q) in enumerate(zip(start, q_lens, strict=True)):
            for pos in range(s, s + q):
                slots.append(int(table[b, pos // BS]) * BS + pos % BS)
        n = int(qsl[-1])
        qsl = torch.cat([qsl, torch.full((pad,), n, dtype=torch.int32)])
        m = CommonAttentionMetadata(
            query_start_loc=qsl.to(dev),
            query_start_loc_cpu=qsl.clone(),
            seq_lens=torch.tensor(seq + [0] * pad, dtype=torch.int32, device=dev),
            num_reqs=2 + pad,
            num_actual_tokens=n + pad,
            max_query_len=max(q_lens),
            max_seq_len=max(seq),
            block_table_tensor=table[: 2 + pad],
            slot_mapping=torch.tensor([*slots, *[-1] * pad, -1, -1], dtype=torch.int64, device=dev),
        )
        md = builder.build(0, m)
        plan = md.attn.plan_info
        decode = max(q_lens) == 1
        if (plan.mode, plan.max_live, md.num_rows) != (
            ("decode", MAX_MODEL_LEN, n + pad) if decode else ("prefill", max(seq), n)
        ):
            fail(f"step {q_lens}+{pad} padding: planned {plan.mode}, bound {plan.max_live}, {md.num_rows} rows")
        if (
            md.attn.plan_info.tensors["kv_indptr"].data_ptr()
            != builder.workspace.row_starts(table.stride(0), 2).data_ptr()
        ):
            fail("the plan's page-list offsets are not the builder's persistent workspace")
        for li, name in enumerate(NAMES):
            q = torch.randn(n + pad + 2, H_Q, D, generator=gen).bfloat16()
            k = torch.randn(n + pad + 2, H_KV, D, generator=gen).bfloat16()
            v = torch.randn(n + pad + 2, H_KV, D, generator=gen)
            if live_v == "fp8_e4m3":
                # Values FP8 represents exactly (after the 0.5 scale): the interpreter's float->FP8 rounding is
                # wrong for some inputs (a Triton bug), so this CPU check avoids rounding altogether.
                v = (v * 2).to(torch.float8_e4m3fn).float() * 0.5
            v = v.bfloat16()
            out = torch.full((n + pad + 2, H_Q, D), float("nan"), dtype=torch.bfloat16, device=dev)
            layer = SimpleNamespace(layer_name=name, _v_scale_float=0.5)
            impls[li].forward(layer, q.to(dev), k.to(dev), v.to(dev), kv[li], md, out)
            if len(bindings) < len(NAMES):
                bindings.append(impls[li]._bound)
            elif impls[li]._bound is not bindings[li]:
                fail(f"layer {li} checked its operands again on an unchanged cache (step {q_lens}+{pad} padding)")
            row = 0
            for b, ql in enumerate(q_lens):
                live_k[li][b].append(k[row : row + ql].float())
                vq = v[row : row + ql].float()
                if live_v == "fp8_e4m3":
                    vq = (vq / 0.5).clamp(-448, 448).to(torch.float8_e4m3fn).float() * 0.5
                live_v_hist[li][b].append(vq)
                ck = cart.keys[li].float()
                cv = cart.values[li].bfloat16()
                if builder.cfg.cartridge_value_dtype == "fp8_e4m3":
                    cl = builder.cartridge[name]
                    cv = (cl.v.float() * cl.v_scale[None, :, None]).cpu()
                keys = torch.cat([ck, *live_k[li][b]])
                vals = torch.cat([cv.float(), *live_v_hist[li][b]])
                total = keys.shape[0]
                for t in range(ql):
                    visible = total - ql + t + 1
                    for h in range(H_Q):
                        g = h // (H_Q // H_KV)
                        s = (keys[:visible, g] @ q[row + t, h].float()) / math.sqrt(D)
                        want = torch.softmax(s, 0) @ vals[:visible, g]
                        got = out[row + t, h].float().cpu()
                        err = float((got - want).norm() / want.norm())
                        if not err < 2e-2:
                            fail(f"shared live_v={live_v} layer {li} request {b} query {t} head {h}: rel err {err:.3g}")
                row += ql
            if torch.isnan(out[n : n + pad]).any():
                fail("a padding request's row was not written (its graph replay would leave garbage)")
            if not torch.isnan(out[n + pad :]).all():
                fail("rows beyond the scheduled tokens and padding requests were written")
    if direct_launches_seen(dispatch) != (dev.type == "cuda"):
        fail(f"direct launches seen: {direct_launches_seen(dispatch)} on {dev.type} (kernel_launch defaults to direct)")
    # What the backend tells the engine's parent about the cache and the prefill: the layout vLLM named, the order
    # the kernels read (the raw tensors above are NHD in memory) and the dispatch's own prefill.
    notes = read_dispatch_notes(dispatch)
    seen = [notes.get(n) for n in (KV_CACHE_LAYOUT_NOTE, KV_CACHE_ORDER_NOTE, PREFILL_IMPL_NOTE)]
    if seen != [["NHD"], ["NHD"], [default_prefill_impl(dev)]]:
        fail(f"dispatch notes (layout, order, prefill) {seen}, not NHD, NHD, {default_prefill_impl(dev)}")
    # A new builder (vLLM builds one per KV cache, the memory profiler's throwaway cache first) drops the layers'
    # bindings, so that the old cache is not held; the next step binds the layer's new cache.
    cfg.compilation_config.static_forward_context = {n: SimpleNamespace(impl=impls[i]) for i, n in enumerate(NAMES)}
    CartridgeMetadataBuilder(spec, NAMES, cfg, dev)
    if any(impl._bound is not None for impl in impls):
        fail("a new metadata builder left the layers bound to the previous KV cache")
    print(f"shared ({live_v} live V): prefill, decode and padded decode match the fp32 reference; operands checked "
          "once per layer and released with the builder")  # fmt: skip


def check_live_pages(dev: torch.device) -> None:
    """vLLM's own attention layers, set up for K16/V8 pages as the Cartridge* models set them up."""
    from torch import nn
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.attention.attention import Attention

    from qualify.errors import QualifyError
    from qualify.serve.backend import CartridgeAttentionBackend, CartridgeAttentionBackendLiveV8
    from qualify.serve.live_pages import use_k16v8_pages

    config = VllmConfig(device_config=DeviceConfig(device="cpu")) if dev.type == "cpu" else VllmConfig()
    config.cache_config.block_size = BS
    with set_current_vllm_config(config):
        scale = 1 / math.sqrt(D)
        model = nn.ModuleList(
            Attention(H_Q, D, scale, num_kv_heads=H_KV, prefix=f"p.{i}.attn", attn_backend=CartridgeAttentionBackend)
            for i in range(LAYERS)
        )
        bf16 = [layer.get_kv_cache_spec(config).page_size_bytes for layer in model]
        if use_k16v8_pages(model) != LAYERS:
            fail("K16/V8 pages: not every attention layer was set up")
        specs = [layer.get_kv_cache_spec(config) for layer in model]
        if any(s.head_size_v != D // 2 or s.page_size_bytes * 4 != b * 3 for s, b in zip(specs, bf16, strict=True)):
            fail(f"K16/V8 pages: specs {specs} are not 3/4 of the BF16 pages ({bf16[0]} bytes)")
        if any(layer.get_attn_backend() is not CartridgeAttentionBackendLiveV8 for layer in model):
            fail("K16/V8 pages: a layer kept the BF16-page backend")
        if any(layer.head_size_v != D for layer in model):
            fail("K16/V8 pages: a layer's output width changed")
        try:
            use_k16v8_pages(model)  # a second time: the layers' backend is no longer the BF16-page one
            fail("K16/V8 pages: set up twice without complaint")
        except QualifyError:
            pass
    print("pages: K16/V8 live pages are 3/4 of BF16 ones, shaped by the V8 backend")


def check_positions(gen: torch.Generator, dev: torch.device) -> None:
    """vLLM's own rotary embedding, shifted as the Cartridge* models shift it: position p rotates as p + T_C."""
    from torch import nn
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    from qualify.serve.rope_shift import shift_rotary_positions

    config = VllmConfig(device_config=DeviceConfig(device="cpu")) if dev.type == "cpu" else VllmConfig()
    with set_current_vllm_config(config), torch.device(dev):
        rope = get_rope(D, max_position=4 * MAX_MODEL_LEN, rope_parameters={"rope_theta": 1e6}, dtype=torch.float32)
        holders = nn.ModuleList([nn.Module() for _ in range(LAYERS)])
        for h in holders:
            h.rotary_emb = rope
        shift_rotary_positions(holders, T_C, MAX_MODEL_LEN)
        # Drawn on the CPU generator explicitly: inside `torch.device(dev)` a bare draw would be made on `dev`.
        cpu = torch.device("cpu")
        pos = torch.randint(0, MAX_MODEL_LEN, (19,), generator=gen, device=cpu).to(dev)
        q = torch.randn(19, H_Q * D, generator=gen, device=cpu).to(dev)
        k = torch.randn(19, H_KV * D, generator=gen, device=cpu).to(dev)
        # forward_native: what torch.compile traces in the engine (vLLM's compile mode turns the rotary custom op
        # off); both read the module's own table, which is what the shift replaces.
        want_q, want_k = rope.forward_native(pos + T_C, q.clone(), k.clone())
        for h in holders:
            got_q, got_k = h.rotary_emb.forward_native(pos, q.clone(), k.clone())
            if not (torch.equal(got_q, want_q) and torch.equal(got_k, want_k)):
                fail("shifted rotary embedding: position p does not rotate as p + cartridge_len")
    print("positions: vLLM's rotary embedding, shifted, rotates p as p + cartridge_len")


def check_inject(tmp: Path, gen: torch.Generator, dev: torch.device) -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from qualify.cartridge.io import load_cartridge
    from qualify.errors import QualifyError
    from qualify.serve.connector import CartridgeInjectConnector
    from qualify.serve.dispatch_log import CACHED_EVENT, DISPATCH_LOG_ENV, read_dispatch_events

    path = tmp / "inject.safetensors"
    write_cartridge(path, gen)
    cart = load_cartridge(path)
    cfg = vllm_config("inject", path)
    events = tmp / "dispatch.log"
    os.environ[DISPATCH_LOG_ENV] = str(events)  # as a measurement sets it for the engine core
    sched = CartridgeInjectConnector(cfg, KVConnectorRole.SCHEDULER, None)
    del os.environ[DISPATCH_LOG_ENV]
    req = SimpleNamespace(request_id="r1", prompt_token_ids=[0] * T_C + [5, 6, 7])
    if sched.get_num_new_matched_tokens(req, BS) != (T_C - BS, False):
        fail("inject connector must load only the cartridge positions a prefix-cache hit does not hold")
    if sched.get_num_new_matched_tokens(req, 0) != (T_C, False):
        fail("inject connector did not claim the placeholder run")
    if read_dispatch_events(events, CACHED_EVENT) != [str(BS), "0"]:
        fail(f"inject connector logged {read_dispatch_events(events, CACHED_EVENT)} cached positions, not [{BS}, 0]")
    plain = SimpleNamespace(request_id="r2", prompt_token_ids=[5, 0, 0])
    if sched.get_num_new_matched_tokens(plain, 0) != (0, False):
        fail("a prompt without the placeholder run must be served without a cartridge")
    try:
        sched.get_num_new_matched_tokens(SimpleNamespace(request_id="r3", prompt_token_ids=[0] * 5 + [9]), 0)
        fail("a partial placeholder run must be refused")
    except QualifyError:
        pass
    blocks = SimpleNamespace(get_block_ids=lambda: ([6, 1, 3],))
    sched.update_state_after_alloc(req, blocks, T_C)
    meta = sched.build_connector_meta(None)
    if sched.build_connector_meta(None).loads:
        fail("connector metadata must be reset after each step")
    unregistered = CartridgeInjectConnector(cfg, KVConnectorRole.WORKER, None)
    unregistered.bind_connector_metadata(meta)
    try:
        unregistered.start_load_kv(SimpleNamespace(no_compile_layers={}))
        fail("a scheduled load without a registered KV cache must be refused, not skipped")
    except QualifyError:
        pass
    worker = CartridgeInjectConnector(cfg, KVConnectorRole.WORKER, None)
    raw = {n: torch.full((8, BS, H_KV, 2 * D), float("nan"), dtype=torch.bfloat16, device=dev) for n in NAMES}
    worker.register_kv_caches({n: r.permute(0, 2, 1, 3) for n, r in raw.items()})
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(SimpleNamespace(no_compile_layers={}))
    for li, n in enumerate(NAMES):
        r = raw[n].cpu()
        for pos in range(T_C):
            blk, off = [6, 1][pos // BS], pos % BS
            if not torch.equal(r[blk, off, :, :D], cart.keys[li][pos].bfloat16()):
                fail(f"inject: layer {li} position {pos} K not at block {blk} slot {off}")
            if not torch.equal(r[blk, off, :, D:], cart.values[li][pos].bfloat16()):
                fail(f"inject: layer {li} position {pos} V not at block {blk} slot {off}")
        untouched = torch.ones(8, BS, dtype=torch.bool)
        untouched[6] = False
        untouched[1] = False
        if not torch.isnan(r[untouched].float()).all():
            fail("inject connector wrote outside the cartridge's slots")
    print("inject: placeholder run claimed, cartridge copied into the request's slots only")


def main() -> int:
    import triton  # noqa: F401  (after TRITON_INTERPRET=1 where it is set)
    from cartridge_attn.api import interpreter_usable

    dev = torch.device(sys.argv[2] if len(sys.argv) > 2 else "cpu")
    if dev.type == "cpu" and not interpreter_usable():
        fail("the CPU check needs TRITON_INTERPRET=1 set before triton's first import")
    if dev.type == "cuda" and interpreter_usable():
        fail("the CUDA check runs the compiled kernel: unset TRITON_INTERPRET")
    from qualify.serve.plugin import register

    register()
    gen = torch.Generator().manual_seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config

    # vLLM's model runner builds the metadata builders inside its config's context, and the backend reads the KV
    # cache layout from there (vLLM's default, NHD, without a connector that asks for another).
    engine = VllmConfig(device_config=DeviceConfig(device="cpu")) if dev.type == "cpu" else VllmConfig()
    with tempfile.TemporaryDirectory() as tmp, set_current_vllm_config(engine):
        check_shared(Path(tmp), "bfloat16", gen, dev)
        check_shared(Path(tmp), "fp8_e4m3", gen, dev)
        check_inject(Path(tmp), gen, dev)
    check_positions(gen, dev)
    check_live_pages(dev)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
