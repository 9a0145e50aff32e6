"""The `kernel` implementation set: attention kernels timed over one decode step / one TTFT proxy.

The implementations, their builders and byte models are declared in `qualify.perf.implementations`
(`KERNEL_SET`); this module holds the builders and the `measure` function the worker runs.

Every implementation serves the same problem: a 632-position (by default) cartridge shared by `batch`
requests, each with its own paged live suffix, `num_layers` attention layers per step.

* fused-k16v8 / fused-k16v16: `cartridge_attn.CartridgeAttention` as it ships, one launch per layer over
  cartridge + live pages (live pages handed out in a shuffled order, as a pool allocator would), the prefill the
  dispatch's on this GPU (`default_prefill_impl`: the Gluon kernel on SM90 with Triton 3.6); fused-k16v8-triton /
  fused-k16v8-gluon: the same with the prefill named (`CartridgeAttention(prefill_impl=...)`); fused-k16v8-cascade:
  decode as a cascade (`CartridgeAttention(decode_cascade=True)`).
* flashinfer-inject-bf16 / -fp8: the cartridge copied into each request's first pages
  (`cartridge_attn.build_injection_layout`); FlashInfer's paged decode; for TTFT, the copy of the
  cartridge into the new requests' pages followed by FA3 paged prefill over the suffix.
* flashinfer-cascade-bf16: `MultiLevelCascadeAttentionWrapper`, shared cartridge level + per-request level.

With `l2_cold`, each layer has its own buffers (a real forward pass does not find the previous layer's
K/V in the 50 MB L2); otherwise all layers reuse one set. KV append (writing the new tokens' K/V) is left out
for every implementation alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from qualify.perf import bytes_model
from qualify.perf.gpu_info import device_facts, read_clocks, versions
from qualify.perf.implementations import KERNEL_SET, load_ref
from qualify.perf.metrics import Metric, metric
from qualify.perf.ncu import range_name
from qualify.perf.spec import Cell, ShapeSet, WorkRequest, WorkResult
from qualify.perf.timing import copy_bandwidth_bytes_per_s, time_step

_WORKSPACE_BYTES = 128 * 1024**2


@dataclass(frozen=True)
class CellSpec:
    shape: ShapeSet
    metric: Metric
    batch: int
    suffix: int
    q_len: int
    live: int
    n_sets: int  # distinct per-layer buffer sets
    redundant: int
    device: torch.device
    seed: int
    kernel_config: Any = None  # a cartridge_attn.KernelConfig for the fused kernel (None: its default table)


def cell_spec(
    shape: ShapeSet,
    metric: Metric,
    batch: int,
    suffix: int,
    *,
    l2_cold: bool,
    redundant: int,
    device: torch.device,
    seed: int,
    kernel_config: Any = None,
) -> CellSpec:
    """One cell: decode runs one query over `suffix + generated_tokens // 2` live tokens, TTFT prefills `suffix`."""
    decode = metric.phase == "decode"
    return CellSpec(
        shape=shape,
        metric=metric,
        batch=batch,
        suffix=suffix,
        q_len=1 if decode else suffix,
        live=shape.decode_live(suffix) if decode else suffix,
        n_sets=shape.num_layers if l2_cold else 1,
        redundant=redundant,
        device=device,
        seed=seed,
        kernel_config=kernel_config,
    )


@dataclass
class Built:
    calls: list[Callable[[], object]]  # one per layer, each already repeating `redundant` times
    keep: list[Any] = field(default_factory=list)  # buffers and wrappers the calls use
    identity: Callable[[], dict[str, Any]] | None = None
    # Bytes per cartridge V value the launches read where that is not what the implementation holds: the Gluon
    # prefill reads an FP8 cartridge's FP16 expansion (`gluon_host.CartridgeV16`), 2 bytes a value.
    cartridge_v_read_bytes: int | None = None


@dataclass(frozen=True)
class PageTable:
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_last_page_len: torch.Tensor
    num_pages: int


def page_table(spec: CellSpec, *, shuffle: bool) -> PageTable:
    page = spec.shape.page_size
    n = -(-spec.live // page)
    gen = torch.Generator()
    gen.manual_seed(spec.seed)
    order = torch.randperm(spec.batch * n, generator=gen) if shuffle else torch.arange(spec.batch * n)
    i32 = {"dtype": torch.int32, "device": spec.device}
    return PageTable(
        qo_indptr=torch.arange(0, spec.batch * spec.q_len + 1, spec.q_len, **i32),
        kv_indptr=torch.arange(0, spec.batch * n + 1, n, **i32),
        kv_indices=order.to(**i32),
        kv_last_page_len=torch.full((spec.batch,), spec.live - (n - 1) * page, **i32),
        num_pages=spec.batch * n,
    )


def _randn(spec: CellSpec, *shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, device=spec.device, dtype=torch.float32).to(dtype)


def _live_pages(spec: CellSpec, pt: PageTable) -> tuple[torch.Tensor, torch.Tensor]:
    s = spec.shape
    return (
        _randn(spec, pt.num_pages, s.page_size, s.num_kv_heads, s.head_dim),
        _randn(spec, pt.num_pages, s.page_size, s.num_kv_heads, s.head_dim),
    )


def layer_calls(spec: CellSpec, one: Callable[[int], Callable[[], object]]) -> list[Callable[[], object]]:
    def repeated(i: int) -> Callable[[], object]:
        f = one(i % spec.n_sets)

        def call() -> None:
            for _ in range(spec.redundant):
                f()

        return call

    return [repeated(i) for i in range(spec.shape.num_layers)]


def _flashinfer() -> Any:
    import flashinfer

    return flashinfer


# -- fused ----------------------------------------------------------------------------------------------
def _fused(
    spec: CellSpec, *, v_fp8: bool, prefill_impl: str | None = None, decode_cascade: bool | None = None
) -> Built:
    import cartridge_attn as ca

    s = spec.shape
    pt = page_table(spec, shuffle=True)
    attn = ca.CartridgeAttention(prefill_impl=prefill_impl, decode_cascade=decode_cascade)
    attn.plan(
        pt.qo_indptr,
        pt.kv_indptr,
        pt.kv_indices,
        pt.kv_last_page_len,
        num_qo_heads=s.num_qo_heads,
        num_kv_heads=s.num_kv_heads,
        head_dim=s.head_dim,
        page_size=s.page_size,
        cartridge_len=s.cartridge_len,
        q_dtype=torch.bfloat16,
        cartridge_v_dtype=torch.float8_e4m3fn if v_fp8 else torch.bfloat16,
        causal=True,
        config=spec.kernel_config,
    )
    sets = []
    for _ in range(spec.n_sets):
        cart_v = torch.randn(s.cartridge_len, s.num_kv_heads, s.head_dim, device=spec.device)
        scale = None
        if v_fp8:
            scale = 0.5 + torch.rand(s.num_kv_heads, device=spec.device)
            cart_v = (cart_v / scale[:, None]).to(torch.float8_e4m3fn)
        else:
            cart_v = cart_v.to(torch.bfloat16)
        live_k, live_v = _live_pages(spec, pt)
        q = _randn(spec, spec.batch * spec.q_len, s.num_qo_heads, s.head_dim)
        sets.append(
            {
                "q": q,
                "cart_k": _randn(spec, s.cartridge_len, s.num_kv_heads, s.head_dim),
                "cart_v": cart_v,
                "scale": scale,
                "live": (live_k, live_v),
                "out": torch.empty_like(q),
            }
        )

    # Each layer's operands are checked once and kept, as serving keeps them (`run_layer`): what they carry across
    # launches (TMA descriptors, the Gluon prefill's FP16 expansion of an FP8 cartridge) is made once, not timed.
    operands = [
        attn.check_layer(
            lay["cart_k"], lay["cart_v"], lay["live"], cartridge_v_scale=lay["scale"], q=lay["q"], out=lay["out"]
        )
        for lay in sets
    ]

    def one(i: int) -> Callable[[], object]:
        lay, layer = sets[i], operands[i]
        return lambda: attn.run_layer(lay["q"], layer, lay["out"])

    gluon = attn.plan_info.config.impl == "gluon"
    return Built(
        layer_calls(spec, one), keep=[attn, sets, operands, pt], identity=lambda: ca.kernel_identity(attn),
        cartridge_v_read_bytes=2 if gluon else None,
    )  # fmt: skip


# -- FlashInfer ---------------------------------------------------------------------------------------
def _injection_caches(spec: CellSpec, pt: PageTable) -> tuple[list[Any], list[torch.Tensor]]:
    """Per set: the injection layout (BF16) and the cartridge's own pages (the copy's source)."""
    import cartridge_attn as ca

    s = spec.shape
    layouts, carts = [], []
    n_cart = s.cartridge_len // s.page_size
    for _ in range(spec.n_sets):
        live_k, live_v = _live_pages(spec, pt)
        lay = ca.build_injection_layout(
            _randn(spec, s.cartridge_len, s.num_kv_heads, s.head_dim),
            _randn(spec, s.cartridge_len, s.num_kv_heads, s.head_dim),
            live_k,
            live_v,
            pt.kv_indptr,
            pt.kv_indices,
            pt.kv_last_page_len,
        )
        del live_k, live_v
        layouts.append(lay)
        carts.append(lay.kv_cache[:n_cart].clone())
    return layouts, carts


def _planned_paged(
    spec: CellSpec, pt: PageTable, kv_indptr: torch.Tensor, kv_indices: torch.Tensor, last: torch.Tensor,
    kv_dtype: torch.dtype,
) -> tuple[Any, torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:  # fmt: skip
    """A single-level FlashInfer wrapper planned over one page table (paged decode, or FA3 paged prefill for
    TTFT), its workspace, and one query and output buffer per set."""
    fi = _flashinfer()
    s = spec.shape
    ws = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=spec.device)
    heads = (s.num_qo_heads, s.num_kv_heads, s.head_dim, s.page_size)
    qs = [_randn(spec, spec.batch * spec.q_len, s.num_qo_heads, s.head_dim) for _ in range(spec.n_sets)]
    outs = [torch.empty_like(q) for q in qs]
    if spec.metric.phase == "decode":
        w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
        w.plan(kv_indptr, kv_indices, last, *heads, q_data_type=torch.bfloat16, kv_data_type=kv_dtype)
    else:
        w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa3")
        w.plan(
            pt.qo_indptr, kv_indptr, kv_indices, last, *heads,
            causal=True, q_data_type=torch.bfloat16, kv_data_type=kv_dtype,
        )  # fmt: skip
    return w, ws, qs, outs


def _inject(spec: CellSpec, *, fp8: bool) -> Built:
    s = spec.shape
    if fp8 and spec.metric.phase != "decode":
        raise ValueError("flashinfer-inject-fp8 has no TTFT implementation (decode only)")
    pt = page_table(spec, shuffle=False)
    layouts, carts = _injection_caches(spec, pt)
    kv_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    caches = [lay.kv_cache.to(kv_dtype) if fp8 else lay.kv_cache for lay in layouts]
    lay0 = layouts[0]
    del layouts  # the FP8 copies replace the BF16 caches; lay0 keeps the page table
    w, ws, qs, outs = _planned_paged(spec, pt, lay0.kv_indptr, lay0.kv_indices, lay0.kv_last_page_len, kv_dtype)
    if spec.metric.phase == "decode":

        def one(i: int) -> Callable[[], object]:
            return lambda: w.run(qs[i], caches[i], out=outs[i])

        return Built(layer_calls(spec, one), keep=[ws, w, caches, qs, outs, lay0])
    n_cart = s.cartridge_len // s.page_size
    pages_per_req = n_cart + -(-spec.live // s.page_size)

    def one_ttft(i: int) -> Callable[[], object]:
        # Every request has the same page count, so its first n_cart pages form one strided view.
        dst = caches[i].view(spec.batch, pages_per_req, *caches[i].shape[1:])[:, :n_cart]
        src = carts[i].unsqueeze(0).expand_as(dst)

        def f() -> None:
            dst.copy_(src)
            w.run(qs[i], caches[i], out=outs[i])

        return f

    return Built(layer_calls(spec, one_ttft), keep=[ws, w, caches, carts, qs, outs, lay0])


def _one_cartridge_pools(spec: CellSpec, pt: PageTable) -> list[Any]:
    """Per set: one page pool holding a single copy of the cartridge's pages, then every request's live pages."""
    import cartridge_attn as ca

    s = spec.shape
    layouts = []
    for _ in range(spec.n_sets):
        live_k, live_v = _live_pages(spec, pt)
        cart_k, cart_v = (_randn(spec, s.cartridge_len, s.num_kv_heads, s.head_dim) for _ in range(2))
        layouts.append(ca.build_cascade_layout(cart_k, cart_v, live_k, live_v, pt.kv_indptr, pt.kv_indices,
                                               pt.kv_last_page_len))  # fmt: skip
        del live_k, live_v, cart_k, cart_v
    return layouts


def _cascade(spec: CellSpec) -> Built:
    fi = _flashinfer()
    s = spec.shape
    pt = page_table(spec, shuffle=False)
    layouts = _one_cartridge_pools(spec, pt)
    c0 = layouts[0]
    ws = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=spec.device)
    w = fi.MultiLevelCascadeAttentionWrapper(2, ws, "NHD")
    total_q = spec.batch * spec.q_len
    w.plan(
        [torch.tensor([0, total_q], dtype=torch.int32, device=spec.device), pt.qo_indptr],
        [c0.shared_indptr, c0.unique_indptr],
        [c0.shared_indices, c0.unique_indices],
        [c0.shared_last_page_len, c0.unique_last_page_len],
        s.num_qo_heads, s.num_kv_heads, s.head_dim, s.page_size,
        causal=True, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
    )  # fmt: skip
    qs = [_randn(spec, total_q, s.num_qo_heads, s.head_dim) for _ in range(spec.n_sets)]

    def one(i: int) -> Callable[[], object]:
        return lambda: w.run(qs[i], layouts[i].kv_cache)

    return Built(layer_calls(spec, one), keep=[ws, w, layouts, qs])


def _shared_pages(spec: CellSpec) -> Built:
    """FlashInfer's single-level paged decode / FA3 prefill with every request's page list starting at one shared
    copy of the cartridge pages (`cartridge_attn.shared_page_table`): what vLLM's prefix caching gives. TTFT
    prefills the suffix over cartridge + suffix pages and copies nothing."""
    import cartridge_attn as ca

    pt = page_table(spec, shuffle=False)
    layouts = _one_cartridge_pools(spec, pt)
    kv_indptr, kv_indices, last = ca.shared_page_table(layouts[0])  # every set has the same table
    w, ws, qs, outs = _planned_paged(spec, pt, kv_indptr, kv_indices, last, torch.bfloat16)

    def one(i: int) -> Callable[[], object]:
        return lambda: w.run(qs[i], layouts[i].kv_cache, out=outs[i])

    return Built(layer_calls(spec, one), keep=[ws, w, layouts, qs, outs, kv_indptr, kv_indices, last])


# The builders `KERNEL_SET` names (qualify.perf.implementations), one per implementation.
def build_fused_k16v8(spec: CellSpec) -> Built:
    return _fused(spec, v_fp8=True)


def build_fused_k16v8_triton(spec: CellSpec) -> Built:
    return _fused(spec, v_fp8=True, prefill_impl="triton")


def build_fused_k16v8_gluon(spec: CellSpec) -> Built:
    return _fused(spec, v_fp8=True, prefill_impl="gluon")


def build_fused_k16v16_gluon(spec: CellSpec) -> Built:
    return _fused(spec, v_fp8=False, prefill_impl="gluon")


def build_fused_k16v8_cascade(spec: CellSpec) -> Built:
    return _fused(spec, v_fp8=True, decode_cascade=True)


def build_fused_k16v16(spec: CellSpec) -> Built:
    return _fused(spec, v_fp8=False)


def build_inject_bf16(spec: CellSpec) -> Built:
    return _inject(spec, fp8=False)


def build_inject_fp8(spec: CellSpec) -> Built:
    return _inject(spec, fp8=True)


def build_cascade_bf16(spec: CellSpec) -> Built:
    return _cascade(spec)


def build_shared_pages_bf16(spec: CellSpec) -> Built:
    return _shared_pages(spec)


def build(name: str, spec: CellSpec) -> Built:
    """Set up implementation `name` of the kernel set for one cell (buffers, plans, one call per layer)."""
    impl = KERNEL_SET.get(name)
    if impl.builder is None:
        raise KeyError(f"kernel implementation {name!r} names no builder")
    builder: Callable[[CellSpec], Built] = load_ref(impl.builder)
    return builder(spec)


def cell_bytes(name: str, spec: CellSpec, cartridge_v_read_bytes: int | None = None) -> int:
    """Unique bytes implementation `name` moves in one cell (every repetition of a redundant launch counted), its
    cartridge V at `cartridge_v_read_bytes` a value when the launches read it so (`Built`)."""
    layout = KERNEL_SET.get(name).bytes
    if layout is None:
        raise KeyError(f"kernel implementation {name!r} names no bytes layout")
    if cartridge_v_read_bytes is not None:
        layout = replace(layout, cartridge_v=cartridge_v_read_bytes)
    s = spec.shape
    shape = bytes_model.AttentionShape(s.num_qo_heads, s.num_kv_heads, s.head_dim, s.cartridge_len)
    if spec.metric.phase == "decode":
        one = bytes_model.decode_step_bytes(layout, shape, s.num_layers, spec.batch, spec.live)
    else:
        one = bytes_model.ttft_bytes(layout, shape, s.num_layers, spec.batch, spec.suffix)
    return one * spec.redundant


def _profile_once(built: Built, name: str) -> None:
    call = built.calls[0]
    call()  # compile / JIT outside the profiled window
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(name)
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    torch.cuda.nvtx.range_pop()


def measure(request: WorkRequest) -> WorkResult:
    """Measure one implementation over every (suffix, batch, metric) of the request's shape set."""
    started = time.perf_counter()
    shape, timing, options = request.shape_set(), request.timing_config(), request.implementation_options()
    KERNEL_SET.get(request.implementation)  # an unknown name fails here, before the GPU is touched
    device = torch.device("cuda", 0)
    torch.manual_seed(request.seed)
    peak = None if request.profile else copy_bandwidth_bytes_per_s(device)
    clocks_before = read_clocks()
    cells: list[Cell] = []
    identity = None
    seed = request.seed
    for suffix in shape.suffixes:
        for batch in shape.batches:
            for metric_name in request.metrics:
                m = metric(metric_name)
                decode = m.phase == "decode"
                seed += 1
                spec = cell_spec(
                    shape,
                    m,
                    batch,
                    suffix,
                    l2_cold=timing.l2_cold and not request.profile,
                    redundant=options.redundant_launches,
                    device=device,
                    seed=seed,
                )
                built = build(request.implementation, spec)
                if request.profile:
                    _profile_once(built, range_name(metric_name, batch, suffix))
                else:
                    t = time_step(
                        built.calls,
                        warmups=timing.warmups,
                        repetitions=timing.repetitions,
                        cuda_graph=timing.cuda_graph,
                    )
                    samples = [batch / (ms / 1000.0) for ms in t.samples_ms] if decode else list(t.samples_ms)
                    facts = built.identity() if built.identity is not None else {}
                    moved = cell_bytes(request.implementation, spec, built.cartridge_v_read_bytes)
                    pct = bytes_model.pct_of_peak(moved, statistics.median(t.samples_ms) / 1000.0, peak)
                    cells.append(
                        Cell(
                            metric=m.name,
                            batch=batch,
                            suffix=suffix,
                            live=spec.live,
                            samples=samples,
                            step_ms=list(t.samples_ms),
                            bytes_moved=moved,
                            pct_peak_bw=pct,
                            method=t.method,
                            detail={
                                "layers": shape.num_layers,
                                "buffer_sets": spec.n_sets,
                                "q_len": spec.q_len,
                                # The compiled variant this cell launched (fused kernel only), from the kernel.
                                "specialization": facts.get("specialization"),
                                # What ran: the fused kernel's identity (config, cubin hash), or a baseline's
                                # own facts (library version, block size, splits, its self-check).
                                "identity": facts or None,
                            },
                        )
                    )
                if identity is None and built.identity is not None:
                    identity = built.identity()
                del built
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
    return WorkResult(
        implementation_set=request.implementation_set,
        implementation=request.implementation,
        options=options.model_dump(),
        cells=cells,
        gpu=device_facts(),
        clocks={"before": clocks_before, "after": read_clocks()},
        versions=versions(),
        identity=identity,
        peak_bandwidth_tbps=None if peak is None else peak / 1e12,
        wall_s=time.perf_counter() - started,
        notes=[m.description for m in map(metric, request.metrics)],
    )
