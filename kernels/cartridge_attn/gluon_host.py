"""Host side of the Gluon prefill (`_gluon_prefill`): availability, the FP16 expansion of FP8 cartridge values, TMA
descriptors, launch and offline builds.

The kernel is written against Triton 3.6's Gluon, the Triton that torch 2.11 and vLLM 0.26 install on the GPU
hosts. Gluon is experimental and its API moves between releases (3.9 renamed the TMA copies and the CTA barrier),
so another Triton is refused here with the reason, never half-compiled.

`compile_offline` builds the kernel for SM90 without a GPU (Triton's own ptxas), which is how the CPU tests check
every variant the dispatch can choose: that it compiles, issues wgmma and TMA, specializes its warps, and spills
nothing in its loops over tiles (nothing at all with one program per work item).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from . import heuristics as H
from .errors import UnsupportedLayoutError

if TYPE_CHECKING:
    import torch

    from .launch import DirectLaunches

__all__ = [
    "GLUON_TRITON",
    "CartridgeV16",
    "compile_offline",
    "descriptors",
    "device_sms",
    "direct_launches",
    "gluon_problem",
    "launch",
    "launch_options",
    "programs_per_sm",
]

GLUON_TRITON = "3.6"  # the Triton release (major.minor) whose Gluon the kernel is written in
# Registers per thread at launch: three warpgroups (two consumers, the producer's and stager's) share 64 K registers
# at 168 each, then setmaxnreg moves them to the consumers (224 each; the third warpgroup keeps 56,
# `_gluon_prefill.AUX_REGISTERS_TWO_CONSUMERS`); with one consumer, two warpgroups at 128.
_MAXNREG = {2: 168, 1: 128}
_SM_REGISTERS = 65536
_CONSUMER_REGISTERS = 224


@cache
def gluon_problem() -> str | None:
    """None when this process can build the Gluon prefill, else why not (one line). Reads the installed Triton's
    version only, importing nothing: a host probe asks this at start-up."""
    from importlib import metadata

    try:
        version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        return "Triton is not installed"
    if ".".join(version.split(".")[:2]) != GLUON_TRITON:
        return f"the Gluon prefill is written for Triton {GLUON_TRITON}.x's Gluon; this is Triton {version}"
    return None


class CartridgeV16:
    """The exact FP16 expansion of one FP8 (e4m3) cartridge V tensor: the Gluon prefill reads it in place of the
    FP8 values. A layer's operands own one (`api.LayerOperands.cartridge_v16`), so it lives as long as they do and
    is made once per layer, not once per launch.

    Every e4m3 value is an FP16 value, and the per-head scale stays out of it (the kernel applies it to the
    accumulator, as before), so the output is bitwise what converting each cartridge tile in the kernel gave. That
    conversion cost every program of every launch about a fifth of its time; this costs one conversion and 2 bytes
    per cartridge value on the device (1.3 MB a layer for Qwen3-8B's 632 positions; decode still reads the FP8
    values).

    It is remade in place, at the same address (so TMA descriptors over it stay valid), when torch's version
    counter of the source moves: any in-place write through torch, through any view. An inference tensor has no
    version counter, so its expansion is remade at every launch. A write that bypasses torch (a raw kernel on the
    tensor's pointer) is not seen: check the layer again for fresh operands.
    """

    def __init__(self) -> None:
        self._source: torch.Tensor | None = None  # held, so that no other tensor takes its address meanwhile
        self._version: int | None = None
        self._fp16: torch.Tensor | None = None

    def get(self, values: torch.Tensor) -> torch.Tensor:
        """The FP16 expansion of ``values`` (FP8 e4m3, any layout): contiguous and up to date. Another tensor than
        the last one replaces the expansion."""
        import torch

        tracked = not values.is_inference()
        version = values._version if tracked else None
        if self._fp16 is None or not _same_tensor(self._source, values):
            # Not an inference tensor itself, so that a later refresh outside inference mode may write it.
            with torch.inference_mode(False):
                self._fp16 = torch.empty(values.shape, dtype=torch.float16, device=values.device)
            self._source, self._version = values, None
        if version is None or version != self._version:
            self._fp16.copy_(values)
            self._version = version
        return self._fp16


def _same_tensor(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    """The same elements: ``b`` is ``a`` or a view of the same bytes with the same shape and strides."""
    return a is not None and (a.device, a.data_ptr(), a.shape, a.stride()) == (b.device, b.data_ptr(), b.shape,
                                                                                b.stride())  # fmt: skip


def launch_options(cfg: H.KernelConfig) -> dict[str, int]:
    """Launch options of a Gluon configuration: one consumer's warps and the launch register count."""
    return {"num_warps": cfg.num_warps, "maxnreg": _MAXNREG[cfg.block_m // 64]}


def programs_per_sm(cfg: H.KernelConfig, head_dim: int, live_v_bits: int) -> int:
    """Programs of ``cfg`` one SM holds at once, by the shared-memory estimate (an upper bound, so never more than
    fit) and by the launch's registers: how many persistent programs the launch gives each SM."""
    need = H.gluon_shared_bytes(cfg, head_dim, live_v_bits) + H.SM90_SHARED_BYTES_RESERVED
    consumers = cfg.block_m // 64
    threads = 128 * (consumers + 1)  # the consumers' warpgroups and the producer's and stager's
    by_registers = _SM_REGISTERS // (_MAXNREG[consumers] * threads)
    return max(1, min(H.SM90_SHARED_BYTES_PER_SM // need, by_registers))


@cache
def device_sms(device: torch.device) -> int:
    """The SMs of ``device`` (132 on an H100 SXM or H200, 114 on an H100 PCIe)."""
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def _shared_layout(block: list[int], dtype: Any) -> Any:
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout.get_default_for(block, dtype)


def _gl_dtype(t: torch.Tensor) -> Any:
    import torch
    from triton.experimental.gluon import language as gl

    return {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float8_e4m3fn: gl.float8e4nv}[t.dtype]


# Where a layout the Gluon prefill cannot read is refused, the Triton prefill can read it.
_OTHER_PREFILL = "; CartridgeAttention(prefill_impl='triton') reads any head stride"


def _check_tma_rows(name: str, t: torch.Tensor, token_dim: int, head_dim: int, *, heads_adjacent: bool) -> None:
    """A tensor whose rows (tokens) are read as boxes of one head: D contiguous, every head inside its token's row
    (adjacent with ``heads_adjacent``, else any head stride), 16-byte aligned."""
    h_kv, head_stride, token_stride = t.shape[-2], t.stride(-2), t.stride(token_dim)
    if t.stride(-1) != 1 or (heads_adjacent and head_stride != head_dim):
        want = "(..., D, 1): heads adjacent" if heads_adjacent else "(..., H, 1): D contiguous"
        raise UnsupportedLayoutError(f"{name} strides", f"{want}, for TMA loads{_OTHER_PREFILL}", tuple(t.stride()))
    if head_stride < head_dim or (h_kv - 1) * head_stride + head_dim > token_stride:
        raise UnsupportedLayoutError(
            f"{name} strides", f"every head inside its token's row, for TMA loads{_OTHER_PREFILL}", tuple(t.stride())
        )
    size = t.element_size()
    if t.data_ptr() % 16 or (token_stride * size) % 16 or (head_stride * size) % 16:
        raise UnsupportedLayoutError(
            f"{name} base / token stride / head stride",
            f"16-byte aligned (for TMA loads){_OTHER_PREFILL}",
            (t.data_ptr() % 16, token_stride, head_stride),
        )


def descriptors(
    cartridge_k: torch.Tensor,
    cartridge_v: torch.Tensor,
    live_k: torch.Tensor,
    live_v: torch.Tensor,
    block_n: int,
    page_size: int,
) -> tuple[Any, Any, Any, Any, int, int, int]:
    """TMA descriptors of cartridge K, V (boxes of ``block_n`` rows of one head over ``(T_c, H_kv * D)``) and of
    live K, V (boxes of one page of one head), the rows from one page to the next in the live views, and the
    columns from one head to the next in the live K and V views.

    The live views are 2-D over token slots, ``(rows, columns)`` with the token stride: page ``p`` starts at row
    ``p * page_rows``, which holds for any page stride that is a whole number of token strides (vLLM's split K / V
    caches and FlashInfer's combined one alike), and head ``h`` at column ``h`` times the head stride, which holds
    for heads further apart than D (the serving plugin's pages hold each head's K and V in one row). They never
    change while the tensors live: the caller keeps them.
    """
    t_c, h_kv, d = cartridge_k.shape
    for name, t in (("cartridge K", cartridge_k), ("cartridge V", cartridge_v)):
        _check_tma_rows(name, t, 0, d, heads_adjacent=True)
    page_rows = live_k.stride(0) // live_k.stride(1)
    for name, t in (("live K pages", live_k), ("live V pages", live_v)):
        _check_tma_rows(name, t, 1, d, heads_adjacent=False)
        if t.stride(0) % t.stride(1) or t.stride(0) // t.stride(1) != page_rows:
            raise UnsupportedLayoutError(
                f"{name} page stride", f"a whole number of token strides, the same for K and V ({page_rows})",
                (t.stride(0), t.stride(1)),
            )  # fmt: skip
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    out: list[Any] = []
    for t in (cartridge_k, cartridge_v):
        block = [block_n, d]
        out.append(TensorDescriptor(t, [t_c, h_kv * d], [t.stride(0), 1], block, _shared_layout(block, _gl_dtype(t))))
    for t in (live_k, live_v):
        rows = (t.shape[0] - 1) * page_rows + page_size
        columns = (h_kv - 1) * t.stride(2) + d
        # The ring's buffers are [block_n, D]; a page lands in a row slice of one, so it takes the same layout.
        layout = _shared_layout([block_n, d], _gl_dtype(t))
        out.append(TensorDescriptor(t, [rows, columns], [t.stride(1), 1], [page_size, d], layout))
    return (*out, page_rows, live_k.stride(2), live_v.stride(2))


def launch(
    cfg: H.KernelConfig,
    grid: tuple[int, int],
    *,
    group: int,
    head_dim: int,
    page_size: int,
    causal: bool,
    cartridge_len: int,
    qk_scale: float,
    q: torch.Tensor,
    out: torch.Tensor,
    descs: tuple[Any, Any, Any, Any, int, int, int],
    cartridge_v_scale: torch.Tensor,
    live_v_scale: torch.Tensor,
    plan_tensors: dict[str, torch.Tensor],
    cartridge_v_scaled: bool,
    launches: DirectLaunches | None = None,
) -> Any:
    """One launch of the Gluon prefill (``descs`` from :func:`descriptors` over 16-bit cartridge values,
    ``plan_tensors`` a plan's device metadata); ``cartridge_v_scaled`` when those values are an FP8 cartridge's
    expansion, whose per-head scale the kernel then applies. With ``launches`` (one layer's, made with
    :func:`direct_launches`), a variant launched before goes through its compiled launcher without Triton's
    per-call binding. Returns the compiled kernel."""
    from ._gluon_prefill import cartridge_prefill_ws_kernel
    from .launch import pointer_specialization

    ck_desc, cv_desc, lk_desc, lv_desc, page_rows, lk_head_cols, lv_head_cols = descs
    t = plan_tensors
    tensors = (t["qo_indptr"], t["kv_indptr"], t["kv_indices"], t["kv_len"], t["tile_req"], t["tile_row"])
    n_tiles, n_kvh = grid
    if cfg.persistent:
        # As many programs as the GPU holds at once, each walking work items (a plan tile, a KV head) in strides, so
        # that a program's next item is loading while it finishes the last.
        per_sm = programs_per_sm(cfg, head_dim, lv_desc.base.dtype.itemsize * 8)
        n_programs = min(n_tiles * n_kvh, device_sms(q.device) * per_sm)
        launch_grid: tuple[int, ...] = (n_programs,)
    else:
        n_programs, launch_grid = n_tiles * n_kvh, grid
    args = (
        q, out, ck_desc, cv_desc, lk_desc, lv_desc, cartridge_v_scale, live_v_scale, *tensors,
        n_tiles, n_kvh, n_programs,
        cartridge_len, qk_scale, page_rows, lk_head_cols, lv_head_cols,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
    )  # fmt: skip
    constexprs = {
        "GROUP": group, "HEAD_DIM": head_dim, "PAGE": page_size, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
        "STAGES": cfg.num_stages, "CAUSAL": causal, "PERSISTENT": cfg.persistent, "CV_SCALE": cartridge_v_scaled,
        "CONSUMER_REGISTERS": _CONSUMER_REGISTERS,
    }  # fmt: skip
    if launches is None:
        return cartridge_prefill_ws_kernel[launch_grid](*args, **constexprs, **launch_options(cfg))
    # What can change between one layer's calls and Triton specializes on: the descriptors, the cartridge length,
    # page rows and head columns are the layer's own (fixed while its operands live); the constexprs follow the
    # configuration and the plan's shape.
    key = (
        cfg, page_size, causal, cartridge_v_scaled, group, head_dim,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), *pointer_specialization((q, out, *tensors)),
    )  # fmt: skip
    return launches.launch(launch_grid, key, args, constexprs, launch_options(cfg))


def direct_launches() -> DirectLaunches:
    """A layer's store of the Gluon prefill's compiled variants, for :func:`launch` without Triton's binding."""
    from ._gluon_prefill import cartridge_prefill_ws_kernel
    from .launch import DirectLaunches

    return DirectLaunches(cartridge_prefill_ws_kernel)


# ---------------------------------------------------------------------------------------------------
# Offline builds (no GPU): what the CPU tests and `scripts/gluon_build.py` compile.
# ---------------------------------------------------------------------------------------------------
_SIG_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8e4nv"}


def compile_offline(
    cfg: H.KernelConfig,
    *,
    group: int,
    head_dim: int,
    page_size: int,
    causal: bool = True,
    q_dtype: str = "bfloat16",
    cartridge_v_dtype: str = "float8_e4m3fn",
    live_v_dtype: str = "bfloat16",
    arch: int = 90,
    kernel: Any = None,
) -> Any:
    """Compile the Gluon prefill for ``sm_<arch>`` (CUDA) without a GPU; returns Triton's CompiledKernel.

    Dtypes are torch names; an FP8 cartridge is built as the launch takes it, its FP16 expansion with the scale
    applied in the kernel (:class:`CartridgeV16`). The signature is what a launch on a serving engine's buffers
    specializes: 32-bit integers, pointers 16-byte aligned, query / output strides and live head columns that are
    multiples of 16 (heads of 64 or 128 elements: the columns are D, 1.5 D, 2 D or 3 D in the layouts served), which
    let the query loads take 16-byte vectors (unaligned, they are built as 2-byte loads); the lengths (``cart_len``,
    ``page_rows``) are left unspecialized, as they are where they are not multiples of 16. A layout whose head
    columns are not multiples of 16 (allowed: 16 bytes suffice) compiles its own variant at its first launch.
    ``kernel`` replaces the shipped kernel function (a mutant's, loaded from its copy of the source).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from ._gluon_prefill import cartridge_prefill_ws_kernel

    if (problem := gluon_problem()) is not None:
        raise RuntimeError(problem)
    gl_types = {"bf16": gl.bfloat16, "fp16": gl.float16, "fp8e4nv": gl.float8e4nv}

    def desc(torch_dtype: str, rows: int) -> str:
        name = _SIG_DTYPES[torch_dtype]
        layout = gl.NVMMASharedLayout.get_default_for([cfg.block_n, head_dim], gl_types[name])
        return f"tensordesc<{name}[{rows}, {head_dim}],{layout!r}>"

    q = _SIG_DTYPES[q_dtype]
    scaled = cartridge_v_dtype == "float8_e4m3fn"
    cv_launched = "float16" if scaled else cartridge_v_dtype
    sig = {
        "q_ptr": f"*{q}", "o_ptr": f"*{q}",
        "ck_desc": desc(q_dtype, cfg.block_n), "cv_desc": desc(cv_launched, cfg.block_n),
        "lk_desc": desc(q_dtype, page_size), "lv_desc": desc(live_v_dtype, page_size),
        "cv_scale_ptr": "*fp32", "lv_scale_ptr": "*fp32",
        **{name: "*i32" for name in ("qo_indptr_ptr", "kv_indptr_ptr", "kv_indices_ptr", "kv_len_ptr",
                                     "tile_req_ptr", "tile_row_ptr")},
        "n_tiles": "i32", "n_kvh": "i32", "n_programs": "i32",
        "cart_len": "i32", "qk_scale": "fp32", "page_rows": "i32", "lk_head_cols": "i32", "lv_head_cols": "i32",
        **{name: "i32" for name in ("stride_qt", "stride_qh", "stride_ot", "stride_oh")},
    }  # fmt: skip
    constexprs = {
        "GROUP": group, "HEAD_DIM": head_dim, "PAGE": page_size, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
        "STAGES": cfg.num_stages, "CAUSAL": causal, "PERSISTENT": cfg.persistent, "CV_SCALE": scaled,
        "CONSUMER_REGISTERS": _CONSUMER_REGISTERS,
    }  # fmt: skip
    sig.update(dict.fromkeys(constexprs, "constexpr"))
    names = list(sig)
    aligned = [n for n, t in sig.items() if t.startswith("*") or n.startswith("stride_") or n.endswith("_head_cols")]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = GluonASTSource(kernel or cartridge_prefill_ws_kernel, sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 128), options=launch_options(cfg))
