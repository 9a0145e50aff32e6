"""Plan / run wrapper around the fused kernel (modelled on FlashInfer's wrapper split).

``plan`` validates everything that does not change between layers (page table, lengths, dtypes, head
counts), reads the page table once on the host and builds the device-side metadata. ``run`` checks the
per-layer tensors against the plan and launches exactly one kernel.

A serving engine calls the same layers with the same cartridge and cache tensors every step, so it checks
them once (``check_layer``, which returns a `LayerOperands`) and launches with ``run_layer``, which checks only
what a new plan can change: the operands were checked for the same shapes and dtypes, the plan's pages lie in
the cache, and the query rows match. This keeps Python validation off the per-layer hot path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, Literal

import torch

from . import _kernel as K
from . import gluon_host
from ._cascade import cartridge_cascade_kernel
from .errors import NotPlannedError, UnsupportedArchitectureError, UnsupportedLayoutError
from .launch import DirectLaunches, pointer_specialization
from .paging import split_combined_kv
from .workspace import DecodeWorkspace

__all__ = ["CartridgeAttention", "LayerOperands", "Plan", "default_prefill_impl"]

_LOG2E = 1.4426950408889634


@cache
def _has_grid_dependency_control(device: torch.device) -> bool:
    """Whether ``device`` runs programmatic dependent launches (griddepcontrol: SM90 and newer). An unqualified
    architecture (``allow_unqualified_arch``) then runs a cascade's two launches one after the other."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)


@cache
def _capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def default_prefill_impl(device: torch.device | str) -> str:
    """The prefill a wrapper without ``prefill_impl`` launches on ``device``: the Gluon kernel where it runs (an
    SM90 device with Triton 3.6), the Triton kernel elsewhere (`heuristics.default_prefill_impl`)."""
    device = torch.device(device)
    if device.type != "cuda" or K.INTERPRETED:
        return K.default_prefill_impl(None, gluon_host.gluon_problem())
    index = torch.cuda.current_device() if device.index is None else device.index
    return K.default_prefill_impl(_capability(torch.device("cuda", index)), gluon_host.gluon_problem())


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


@dataclass(frozen=True)
class Plan:
    """What ``plan`` fixed for the following ``run`` calls.

    Attributes
    ----------
    mode : str
        ``"decode"`` (one query per request, requests packed per program) or ``"prefill"``.
    batch, total_q, max_live : int
        Requests, query rows and the longest live suffix.
    num_qo_heads, num_kv_heads, head_dim, page_size, cartridge_len : int
        Problem shape.
    q_dtype, cartridge_v_dtype, live_v_dtype : torch.dtype
        Element types; keys (cartridge and live) have ``q_dtype``.
    causal : bool
        Bottom-right causal mask over the live suffix.
    sm_scale : float
        Softmax scale.
    config : KernelConfig
        Launch configuration.
    grid : tuple of int
        Launch grid ``(programs per KV head, H_kv)``.
    """

    mode: str
    batch: int
    total_q: int
    max_live: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    cartridge_len: int
    q_dtype: torch.dtype
    cartridge_v_dtype: torch.dtype
    live_v_dtype: torch.dtype
    causal: bool
    sm_scale: float
    config: K.KernelConfig
    grid: tuple[int, int]
    max_page_index: int
    device: torch.device
    tensors: dict[str, torch.Tensor] = field(repr=False, default_factory=dict)

    @cached_property
    def operand_signature(self) -> tuple:
        """What a layer's operands are checked against; equal for every plan of one engine."""
        return (
            self.num_qo_heads, self.num_kv_heads, self.head_dim, self.page_size, self.cartridge_len,
            self.q_dtype, self.cartridge_v_dtype, self.live_v_dtype, self.device,
        )  # fmt: skip


@dataclass(frozen=True)
class LayerOperands:
    """One layer's tensors that stay the same from step to step, checked once by ``check_layer``.

    Attributes
    ----------
    cartridge_k, cartridge_v : torch.Tensor
        ``(T_c, H_kv, D)``.
    cartridge_v_scale, live_v_scale : torch.Tensor
        ``(H_kv,)`` float32 on the device (ones for BF16 values).
    live_k, live_v : torch.Tensor
        ``(num_pages, page_size, H_kv, D)`` views of the paged cache.
    num_pages : int
        Pages in the cache; a plan whose page numbers reach it is refused.
    signature : tuple
        The ``Plan.operand_signature`` they were checked against.
    launches : DirectLaunches or None
        With ``check_layer(direct_launch=True)``: this layer's compiled kernels, launched without Triton's
        per-call binding after their first launch (`cartridge_attn.launch`); the cascade's and the Gluon
        prefill's have their own (the Gluon one only where Triton 3.6's Gluon is installed).
    """

    cartridge_k: torch.Tensor
    cartridge_v: torch.Tensor
    cartridge_v_scale: torch.Tensor
    live_k: torch.Tensor
    live_v: torch.Tensor
    live_v_scale: torch.Tensor
    num_pages: int
    signature: tuple
    launches: DirectLaunches | None = field(default=None, compare=False, repr=False)
    cascade_launches: DirectLaunches | None = field(default=None, compare=False, repr=False)
    gluon_launches: DirectLaunches | None = field(default=None, compare=False, repr=False)
    # TMA descriptors by tile height (and, for the Gluon prefill, page size), built on the first launch that needs
    # them (they never change while the operands live).
    descriptors: dict[Any, tuple[Any, ...]] = field(default_factory=dict, compare=False, repr=False)
    # An FP8 cartridge's FP16 expansion, which the Gluon prefill reads: made at its first launch, once per layer.
    cartridge_v16: gluon_host.CartridgeV16 = field(default_factory=gluon_host.CartridgeV16, compare=False, repr=False)

    def cartridge_descriptors(self, block_n: int) -> tuple[Any, Any]:
        """Host TMA descriptors of the cartridge K and V viewed as ``(T_c, H_kv * D)``, boxes of ``block_n`` rows
        by one head; the layout the TMA unit needs is checked here, once per tile height."""
        if block_n not in self.descriptors:
            self.descriptors[block_n] = tuple(
                _cartridge_descriptor(name, t, block_n)
                for name, t in (("cartridge K", self.cartridge_k), ("cartridge V", self.cartridge_v))
            )
        return self.descriptors[block_n]


def _cartridge_descriptor(name: str, t: torch.Tensor, block_n: int) -> Any:
    from triton.tools.tensor_descriptor import TensorDescriptor

    t_c, h_kv, d = t.shape
    if t.stride(1) != d:
        raise UnsupportedLayoutError(f"{name} head stride", f"{d} (heads adjacent, for TMA loads)", t.stride(1))
    if t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
        raise UnsupportedLayoutError(
            f"{name} base / token stride", "16-byte aligned (for TMA loads)", (t.data_ptr() % 16, t.stride(0))
        )
    return TensorDescriptor(t, [t_c, h_kv * d], [t.stride(0), 1], [block_n, d])


def _split_workspace(
    cfg: K.KernelConfig, batch: int, num_kv_heads: int, num_qo_heads: int, head_dim: int, dev: torch.device
) -> dict[str, torch.Tensor]:
    """Split decode's partial states (fp32 accumulators, max and sum per row) and its arrival counters, which
    the combining program re-arms to 0, and a decode cascade's cartridge states; one-element stand-ins for what
    the launch does not use."""
    f32 = {"dtype": torch.float32, "device": dev}
    one = torch.zeros(1, **f32)
    tensors = {"split_o": one, "split_ml": one, "split_count": torch.zeros(1, dtype=torch.int32, device=dev)}
    if cfg.splits > 1:
        states = batch * num_kv_heads * cfg.splits
        tensors = {
            "split_o": torch.empty(states * cfg.block_m * head_dim, **f32),
            "split_ml": torch.empty(states * 2 * cfg.block_m, **f32),
            "split_count": torch.zeros(batch * num_kv_heads, dtype=torch.int32, device=dev),
        }
    rows = K.cascade_state_rows(cfg, batch, num_qo_heads)
    tensors["cart_o"] = torch.empty(rows * head_dim, **f32) if rows else one
    tensors["cart_ml"] = torch.empty(rows * 2, **f32) if rows else one
    return tensors


def _as_host_ints(name: str, t: torch.Tensor, dim: int = 1) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise UnsupportedLayoutError(name, "a torch.Tensor", type(t).__name__)
    if t.dtype not in (torch.int32, torch.int64) or t.dim() != dim:
        raise UnsupportedLayoutError(name, f"a {dim}-D int32/int64 tensor", f"{t.dim()}-D {_dtype_name(t.dtype)}")
    return t.detach().to("cpu", torch.int64)


def interpreter_usable() -> bool:
    """Whether the Triton interpreter can run the kernel in this process.

    Triton decides per ``@triton.jit`` at decoration time. If ``triton`` was imported before
    ``TRITON_INTERPRET=1`` was set, its own library functions (``tl.cdiv``, ``tl.max``, ...) stay compiled-mode
    objects that the interpreter cannot call, even though this package's kernel is interpreted.
    """
    from triton.language import standard

    return K.INTERPRETED and type(standard.cdiv).__name__ == "InterpretedFunction"


def check_device(
    device: torch.device,
    allow_unqualified_arch: bool = False,
    device_capability: tuple[int, int] | None = None,
) -> None:
    """Reject devices outside the qualified envelope.

    Parameters
    ----------
    device : torch.device
        Where the tensors live. CPU is accepted only with ``TRITON_INTERPRET=1`` (tests).
    allow_unqualified_arch : bool
        Run on a CUDA GPU other than SM90 anyway (unqualified; numbers and speed are not vouched for).
    device_capability : tuple of int or None
        ``(major, minor)`` to validate as well as the device's own capability, which is always queried. This
        only narrows the envelope: it lets a contract test show the guard refusing, say, ``(8, 9)`` on an SM90
        host, while a GPU outside the envelope is refused whatever capability is passed. None (default)
        validates the device alone. Ignored on CPU and under the interpreter, like the device's own.

    Raises
    ------
    UnsupportedArchitectureError
        Naming the ``compute capability`` that is outside the envelope.
    """
    if device.type == "cpu":
        if not K.INTERPRETED:
            raise UnsupportedArchitectureError(
                "CPU tensors need the Triton interpreter (TRITON_INTERPRET=1 set before importing cartridge_attn);"
                " that mode is for tests only"
            )
        if not interpreter_usable():
            raise UnsupportedArchitectureError(
                "TRITON_INTERPRET=1 was set after triton had been imported in this process, so Triton's own"
                " library functions are not interpreted; set it before the first import of triton"
            )
        return
    if device.type != "cuda":
        raise UnsupportedArchitectureError(f"device: expected a CUDA device of SM90, got {device}")
    if K.INTERPRETED:
        return
    if allow_unqualified_arch:
        return
    # The given capability is checked first so that its rejection is the one reported; the device's own is
    # checked regardless, so a capability passed here can never let an unqualified GPU through.
    given = [] if device_capability is None else [(tuple(device_capability), " (as given by device_capability)")]
    for cap, source in [*given, (torch.cuda.get_device_capability(device), "")]:
        if cap not in K.QUALIFIED_ARCHS:
            raise UnsupportedArchitectureError(
                f"device {torch.cuda.get_device_name(device)!r}: compute capability {cap[0]}.{cap[1]}{source} is"
                f" outside the qualified envelope {[f'{a}.{b}' for a, b in K.QUALIFIED_ARCHS]} (SM90: H100/H200);"
                " pass allow_unqualified_arch=True to run unqualified"
            )


def _check_static(
    *,
    num_qo_heads: int,
    num_kv_heads: int,
    head_dim: int,
    page_size: int,
    cartridge_len: int,
    q_dtype: torch.dtype,
    cartridge_k_dtype: torch.dtype | None,
    cartridge_v_dtype: torch.dtype,
    live_k_dtype: torch.dtype | None,
    live_v_dtype: torch.dtype | None,
    kv_layout: str,
) -> tuple[int, torch.dtype]:
    """Checks that do not depend on the batch; returns (GQA group, live V dtype)."""
    if kv_layout != "NHD":
        raise UnsupportedLayoutError("kv_layout", "'NHD' (pages of shape (num_pages, page_size, H_kv, D))", kv_layout)
    if num_kv_heads <= 0 or num_qo_heads % num_kv_heads:
        raise UnsupportedLayoutError(
            "num_qo_heads / num_kv_heads", "a positive integer group size", f"{num_qo_heads} / {num_kv_heads}"
        )
    group = num_qo_heads // num_kv_heads
    if group not in K.SUPPORTED_GROUPS:
        raise UnsupportedLayoutError("GQA group size", f"one of {K.SUPPORTED_GROUPS}", group)
    if head_dim not in K.SUPPORTED_HEAD_DIMS:
        raise UnsupportedLayoutError("head_dim", f"one of {K.SUPPORTED_HEAD_DIMS}", head_dim)
    if page_size not in K.SUPPORTED_PAGE_SIZES:
        raise UnsupportedLayoutError("page_size", f"one of {K.SUPPORTED_PAGE_SIZES}", page_size)
    if cartridge_len <= 0 or cartridge_len % page_size:
        raise UnsupportedLayoutError(
            "cartridge_len",
            f"a positive multiple of page_size={page_size} (the live suffix must start on a page boundary)",
            cartridge_len,
        )
    if q_dtype not in K.SUPPORTED_Q_DTYPES:
        raise UnsupportedLayoutError("q dtype", "bfloat16 or float16", _dtype_name(q_dtype))
    for name, dt in (("cartridge K dtype", cartridge_k_dtype), ("live K dtype", live_k_dtype)):
        if dt is not None and dt != q_dtype:
            extra = " (FP8 keys are not supported)" if dt.itemsize == 1 else ""
            raise UnsupportedLayoutError(name, f"{_dtype_name(q_dtype)}, the query dtype{extra}", _dtype_name(dt))
    live_v_dtype = q_dtype if live_v_dtype is None else live_v_dtype
    for name, dt in (("cartridge V dtype", cartridge_v_dtype), ("live V dtype", live_v_dtype)):
        if dt not in (q_dtype, K.FP8_DTYPE):
            raise UnsupportedLayoutError(name, f"float8_e4m3fn or {_dtype_name(q_dtype)}", _dtype_name(dt))
    return group, live_v_dtype


def _prefill_tiles(
    q_lens: list[int], live: list[int], group: int, block_m: int, cartridge_len: int, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(request, first row) of every prefill tile, longest first, so that the last wave is made of short ones.

    ``live`` only orders the tiles: an upper bound of each live length gives the same launch, possibly in a
    slightly different order.
    """
    reqs, rows, work = [], [], []
    for b, (n_q, n_live) in enumerate(zip(q_lens, live, strict=True)):
        for r0 in range(0, n_q * group, block_m):
            tok_hi = min((r0 + block_m - 1) // group, n_q - 1)
            reqs.append(b)
            rows.append(r0)
            work.append(cartridge_len + (n_live - n_q + tok_hi + 1 if causal else n_live))
    order = sorted(range(len(work)), key=lambda i: -work[i])
    return torch.tensor([reqs[i] for i in order], dtype=torch.int32), torch.tensor(
        [rows[i] for i in order], dtype=torch.int32
    )


def _check_gluon(
    cfg: K.KernelConfig,
    mode: str,
    head_dim: int,
    live_v_dtype: torch.dtype,
    dev: torch.device,
) -> None:
    """Refuse a Gluon configuration this plan cannot launch: decode, a stage ring over SM90's shared memory, a
    non-CUDA device (Gluon has no interpreter), or a Triton whose Gluon the kernel is not written in."""
    if cfg.impl != "gluon":
        return
    if mode != "prefill":
        raise UnsupportedLayoutError("config impl", "'triton' in decode (the Gluon kernel is prefill only)", cfg.impl)
    need = K.gluon_shared_bytes(cfg, head_dim, live_v_dtype.itemsize * 8)
    if need > K.SM90_SHARED_BYTES:
        raise UnsupportedLayoutError(
            f"gluon config {cfg.tag} shared memory", f"<= {K.SM90_SHARED_BYTES} bytes (fewer stages or block_n 64)",
            f"{need} bytes for {_dtype_name(live_v_dtype)} live values",
        )  # fmt: skip
    if dev.type != "cuda" or K.INTERPRETED:
        where = "the Triton interpreter" if K.INTERPRETED else str(dev)
        raise UnsupportedLayoutError("config impl 'gluon'", "a CUDA SM90 device (Gluon has no interpreter)", where)
    if (problem := gluon_host.gluon_problem()) is not None:
        raise UnsupportedLayoutError("config impl 'gluon'", f"Triton {gluon_host.GLUON_TRITON}.x", problem)


class CartridgeAttention:
    """Fused attention over a shared cartridge followed by each request's paged live suffix.

    One kernel launch per ``run``; one online-softmax state per (request, query head); no LSE, no merge.

    Examples
    --------
    >>> attn = CartridgeAttention()
    >>> attn.plan(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, num_qo_heads=32, num_kv_heads=8,
    ...           head_dim=128, page_size=8, cartridge_len=632)            # doctest: +SKIP
    >>> out = attn.run(q, cartridge_k, cartridge_v, (live_k, live_v))    # doctest: +SKIP
    """

    def __init__(self, prefill_impl: str | None = None, decode_cascade: bool | None = None) -> None:
        """``prefill_impl`` picks the prefill kernel of default configurations: ``"gluon"`` (the warp-specialized
        Gluon kernel, SM90 with Triton 3.6; `gluon_host`), ``"triton"``, or None for the dispatch's choice on the
        planned device (:func:`default_prefill_impl`: Gluon where it runs). The Gluon kernel reads live pages whose
        heads sit anywhere inside a token's row (16-byte aligned); a layout it cannot read is refused at the first
        prefill launch, naming the tensor, and ``"triton"`` reads any head stride.
        ``decode_cascade`` makes every default decode configuration a cascade (`_cascade`: the cartridge over
        wide tiles of every request's rows, then the live walk) with True, none with False; None leaves it to the
        dispatch (`heuristics.cascade_by_default`)."""
        if prefill_impl is not None and prefill_impl not in K.IMPLS:
            raise UnsupportedLayoutError("prefill_impl", f"None or one of {K.IMPLS}", prefill_impl)
        if decode_cascade is not None and not isinstance(decode_cascade, bool):
            raise UnsupportedLayoutError("decode_cascade", "None, True or False", decode_cascade)
        self.prefill_impl = prefill_impl
        self.decode_cascade = decode_cascade
        self._plan: Plan | None = None
        self._ones: dict[tuple[torch.device, int], torch.Tensor] = {}
        self.last_compiled: Any = None
        self.last_cascade_compiled: Any = None  # a decode cascade's first launch (`_cascade`), else None

    def _prefill_on(self, device: torch.device) -> str:
        """The prefill implementation of this wrapper's default configurations on ``device``."""
        return self.prefill_impl or default_prefill_impl(device)

    @property
    def plan_info(self) -> Plan:
        """The current plan; raises :class:`NotPlannedError` before :meth:`plan`."""
        if self._plan is None:
            raise NotPlannedError("CartridgeAttention.run/plan_info called before plan()")
        return self._plan

    # -----------------------------------------------------------------------------------------------
    def plan(
        self,
        qo_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        kv_indices: torch.Tensor,
        kv_last_page_len: torch.Tensor,
        *,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        page_size: int,
        cartridge_len: int,
        q_dtype: torch.dtype = torch.bfloat16,
        cartridge_k_dtype: torch.dtype | None = None,
        cartridge_v_dtype: torch.dtype = torch.float8_e4m3fn,
        live_k_dtype: torch.dtype | None = None,
        live_v_dtype: torch.dtype | None = None,
        causal: bool = True,
        sm_scale: float | None = None,
        kv_layout: str = "NHD",
        mode: Literal["auto", "decode", "prefill"] = "auto",
        config: K.KernelConfig | None = None,
        device: torch.device | str | None = None,
        allow_unqualified_arch: bool = False,
        device_capability: tuple[int, int] | None = None,
    ) -> Plan:
        """Validate a batch and precompute the launch.

        Parameters
        ----------
        qo_indptr : torch.Tensor
            ``(B + 1,)`` int; request ``b`` has queries ``qo_indptr[b]:qo_indptr[b + 1]`` (at least one).
        kv_indptr, kv_indices, kv_last_page_len : torch.Tensor
            Live page table, ``(B + 1,)``, ``(nnz,)``, ``(B,)`` int; every request has at least one live
            token (see :mod:`cartridge_attn.paging`).
        num_qo_heads, num_kv_heads, head_dim : int
            ``num_qo_heads / num_kv_heads`` an integer from 1 to 16; ``head_dim`` in {64, 128}.
        page_size : int
            8 or 16 tokens.
        cartridge_len : int
            ``T_c``, a positive multiple of ``page_size``.
        q_dtype : torch.dtype
            bfloat16 or float16; cartridge and live keys must have the same dtype.
        cartridge_k_dtype, live_k_dtype : torch.dtype or None
            Key dtypes, checked against ``q_dtype`` (None means ``q_dtype``). FP8 keys are rejected.
        cartridge_v_dtype : torch.dtype
            ``torch.float8_e4m3fn`` (default) or ``q_dtype``.
        live_v_dtype : torch.dtype or None
            ``q_dtype`` (default when None) or ``torch.float8_e4m3fn``.
        causal : bool
            Bottom-right causal mask over the live suffix (every query sees the whole cartridge).
        sm_scale : float or None
            Softmax scale, ``1 / sqrt(head_dim)`` when None.
        kv_layout : str
            Only ``"NHD"``.
        mode : {"auto", "decode", "prefill"}
            ``auto`` picks decode when every request has exactly one query.
        config : KernelConfig or None
            Launch configuration; the tuned default when None.
        device : torch.device, str or None
            Device of the run tensors; ``kv_indices``' device when None.
        allow_unqualified_arch : bool
            Permit a CUDA GPU outside the qualified SM90 envelope.
        device_capability : tuple of int or None
            ``(major, minor)`` validated in addition to the device's own capability (see :func:`check_device`):
            it can only make the architecture check refuse, e.g. ``(8, 9)`` to show the guard on an SM90 host.

        Returns
        -------
        Plan
            Also kept on the wrapper for :meth:`run`.
        """
        group, live_v_dtype = _check_static(
            num_qo_heads=num_qo_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            page_size=page_size,
            cartridge_len=cartridge_len,
            q_dtype=q_dtype,
            cartridge_k_dtype=cartridge_k_dtype,
            cartridge_v_dtype=cartridge_v_dtype,
            live_k_dtype=live_k_dtype,
            live_v_dtype=live_v_dtype,
            kv_layout=kv_layout,
        )
        qo = _as_host_ints("qo_indptr", qo_indptr)
        kvp = _as_host_ints("kv_indptr", kv_indptr)
        kvi = _as_host_ints("kv_indices", kv_indices)
        last = _as_host_ints("kv_last_page_len", kv_last_page_len)
        batch = qo.numel() - 1
        if batch < 1:
            raise UnsupportedLayoutError("qo_indptr", "at least 2 entries (one request)", qo.numel())
        if kvp.numel() != batch + 1 or last.numel() != batch:
            raise UnsupportedLayoutError(
                "kv_indptr / kv_last_page_len length",
                f"{batch + 1} / {batch} (from qo_indptr)",
                f"{kvp.numel()} / {last.numel()}",
            )
        if int(qo[0]) != 0 or int(kvp[0]) != 0:
            raise UnsupportedLayoutError("qo_indptr[0], kv_indptr[0]", "0, 0", f"{int(qo[0])}, {int(kvp[0])}")
        q_lens = qo[1:] - qo[:-1]
        n_pages = kvp[1:] - kvp[:-1]
        if bool((q_lens < 1).any()):
            b = int(torch.nonzero(q_lens < 1)[0])
            raise UnsupportedLayoutError(f"query length of request {b}", "at least 1", int(q_lens[b]))
        if bool((n_pages < 1).any()):
            b = int(torch.nonzero(n_pages < 1)[0])
            raise UnsupportedLayoutError(
                f"live tokens of request {b}", "at least 1 (zero live tokens are not supported)", 0
            )
        if bool(((last < 1) | (last > page_size)).any()):
            b = int(torch.nonzero((last < 1) | (last > page_size))[0])
            raise UnsupportedLayoutError(f"kv_last_page_len[{b}]", f"in [1, {page_size}]", int(last[b]))
        if kvi.numel() < int(kvp[-1]):
            raise UnsupportedLayoutError("kv_indices length", f"at least kv_indptr[-1] = {int(kvp[-1])}", kvi.numel())
        used = kvi[: int(kvp[-1])]
        if bool((used < 0).any()):
            raise UnsupportedLayoutError("kv_indices", "non-negative page numbers", int(used.min()))
        live = (n_pages - 1) * page_size + last
        if causal and bool((q_lens > live).any()):
            b = int(torch.nonzero(q_lens > live)[0])
            raise UnsupportedLayoutError(
                f"request {b}",
                "query length <= live length (queries are the newest live tokens)",
                f"{int(q_lens[b])} queries over {int(live[b])} live tokens",
            )

        dev = torch.device(device) if device is not None else kv_indices.device
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        check_device(dev, allow_unqualified_arch, device_capability)

        if mode == "auto":
            mode = "decode" if bool((q_lens == 1).all()) else "prefill"
        if mode == "decode" and not bool((q_lens == 1).all()):
            raise UnsupportedLayoutError(
                "mode='decode'", "exactly one query per request", f"query lengths {q_lens.tolist()}"
            )
        if mode not in ("decode", "prefill"):
            raise UnsupportedLayoutError("mode", "'auto', 'decode' or 'prefill'", mode)

        max_live = int(live.max())
        if config is None:
            if mode == "decode":
                config = K.decode_config(
                    group, head_dim, batch, max_live, num_kv_heads=num_kv_heads, cartridge_len=cartridge_len,
                    cart_rows=K.cascade_rows(self.decode_cascade),
                )  # fmt: skip
            else:
                config = K.prefill_config(
                    group, head_dim, rows=int(qo[-1]) * group, num_kv_heads=num_kv_heads, impl=self._prefill_on(dev),
                    live_v_bits=live_v_dtype.itemsize * 8,
                )  # fmt: skip
        self._check_config(config, mode, group)
        _check_gluon(config, mode, head_dim, live_v_dtype, dev)

        i32 = {"dtype": torch.int32, "device": dev}
        tensors = {
            "qo_indptr": qo.to(**i32),
            "kv_indptr": kvp.to(**i32),
            "kv_indices": used.to(**i32) if used.numel() else torch.zeros(1, **i32),
            "kv_len": live.to(**i32),
        }
        if mode == "decode":
            n_prog = -(-batch // config.reqs_per_program) * config.splits
            tensors["tile_req"] = torch.zeros(1, **i32)
            tensors["tile_row"] = torch.zeros(1, **i32)
        else:
            tile_req, tile_row = _prefill_tiles(
                q_lens.tolist(), live.tolist(), group, config.block_m, cartridge_len, causal
            )
            tensors["tile_req"] = tile_req.to(**i32)
            tensors["tile_row"] = tile_row.to(**i32)
            n_prog = tile_req.numel()

        tensors.update(_split_workspace(config, batch, num_kv_heads, num_qo_heads, head_dim, dev))
        self._plan = Plan(
            mode=mode,
            batch=batch,
            total_q=int(qo[-1]),
            max_live=max_live,
            num_qo_heads=num_qo_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            page_size=page_size,
            cartridge_len=cartridge_len,
            q_dtype=q_dtype,
            cartridge_v_dtype=cartridge_v_dtype,
            live_v_dtype=live_v_dtype,
            causal=causal,
            sm_scale=float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(head_dim),
            config=config,
            grid=(n_prog, num_kv_heads),
            max_page_index=int(used.max()) if used.numel() else -1,
            device=dev,
            tensors=tensors,
        )
        return self._plan

    def plan_block_table(
        self,
        query_start_loc: torch.Tensor,
        query_lens: list[int],
        seq_lens: torch.Tensor,
        block_table: torch.Tensor,
        *,
        max_seq_len: int,
        seq_lens_bound: list[int] | None = None,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        page_size: int,
        cartridge_len: int,
        q_dtype: torch.dtype = torch.bfloat16,
        cartridge_v_dtype: torch.dtype = torch.float8_e4m3fn,
        live_v_dtype: torch.dtype | None = None,
        causal: bool = True,
        sm_scale: float | None = None,
        allow_unqualified_arch: bool = False,
        workspace: DecodeWorkspace | None = None,
    ) -> Plan:
        """Plan from a serving engine's block table, without reading device memory on the host.

        A serving engine (vLLM) already holds the batch on the device: ``query_start_loc`` ``(B + 1,)``,
        ``seq_lens`` ``(B,)`` live lengths including this step's queries, and ``block_table`` ``(>= B, W)``
        whose row ``b`` lists request ``b``'s live pages in order. Row ``b`` is used as the request's page
        list in place (``kv_indptr[b] = b * W``), so nothing is gathered or copied, and no host sync is
        needed. ``query_lens`` (host) is exact; ``seq_lens_bound`` (host, optional) and ``max_seq_len``
        are upper bounds, used only to choose the launch configuration and to order prefill tiles.

        The engine guarantees that its block ids are valid pages; unlike :meth:`plan`, page numbers are
        not range-checked here (that would need the block table on the host).

        A decode batch may end in padding requests, as a CUDA-graph replay of a larger batch gives them: query
        length 0 and live length 0 (``seq_lens`` 0). Each is planned as a request of its own whose single
        query row is its index, so the plan's query rows are the padded batch; the kernel attends such a row
        over the cartridge alone and the engine discards it.

        With ``workspace`` (allocated once for the engine's largest batch), the plan's split states, arrival
        counters and page-list offsets are views of it: a CUDA graph captured over this plan's launch stays valid
        for every later plan of the same batch size and configuration.
        """
        group, live_v_dtype = _check_static(
            num_qo_heads=num_qo_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            page_size=page_size,
            cartridge_len=cartridge_len,
            q_dtype=q_dtype,
            cartridge_k_dtype=None,
            cartridge_v_dtype=cartridge_v_dtype,
            live_k_dtype=None,
            live_v_dtype=live_v_dtype,
            kv_layout="NHD",
        )
        batch = len(query_lens)
        if batch < 1:
            raise UnsupportedLayoutError("query_lens", "at least one request", 0)
        real = len(query_lens)
        while real > 0 and query_lens[real - 1] == 0:
            real -= 1
        padded = real < batch
        if real == 0 or any(n < 1 for n in query_lens[:real]) or (padded and any(n != 1 for n in query_lens[:real])):
            raise UnsupportedLayoutError(
                "query_lens",
                "at least one query per request (trailing padding requests of 0 queries only in a decode batch)",
                list(query_lens),
            )
        for name, t, shape in (("query_start_loc", query_start_loc, (batch + 1,)), ("seq_lens", seq_lens, (batch,))):
            if t.dtype != torch.int32 or t.dim() != 1 or t.shape[0] < shape[0]:
                raise UnsupportedLayoutError(
                    name, f"int32 of at least {shape}", f"{_dtype_name(t.dtype)} {tuple(t.shape)}"
                )
        if block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.shape[0] < batch:
            raise UnsupportedLayoutError(
                "block_table",
                f"2-D int32 with at least {batch} rows",
                f"{_dtype_name(block_table.dtype)} {tuple(block_table.shape)}",
            )
        if block_table.stride(1) != 1:
            raise UnsupportedLayoutError("block_table innermost stride", 1, block_table.stride(1))
        if workspace is not None:
            workspace.check_batch(batch)
            if workspace.decode_cascade != self.decode_cascade:
                raise UnsupportedLayoutError(
                    "workspace decode_cascade", f"{self.decode_cascade} (the wrapper's)", workspace.decode_cascade
                )
        dev = block_table.device
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        check_device(dev, allow_unqualified_arch)
        bound = list(seq_lens_bound) if seq_lens_bound is not None else [max_seq_len] * batch
        if len(bound) != batch:
            raise UnsupportedLayoutError("seq_lens_bound", f"{batch} entries (one per request)", len(bound))
        mode = "decode" if padded or all(n == 1 for n in query_lens) else "prefill"
        if mode == "decode":
            config = K.decode_config(
                group, head_dim, batch, max_seq_len, num_kv_heads=num_kv_heads, cartridge_len=cartridge_len,
                cart_rows=K.cascade_rows(self.decode_cascade),
            )  # fmt: skip
        else:
            config = K.prefill_config(
                group, head_dim, rows=sum(query_lens) * group, num_kv_heads=num_kv_heads, impl=self._prefill_on(dev),
                live_v_bits=live_v_dtype.itemsize * 8,
            )  # fmt: skip
        self._check_config(config, mode, group)
        _check_gluon(config, mode, head_dim, live_v_dtype, dev)
        i32 = {"dtype": torch.int32, "device": dev}
        row = block_table.stride(0)
        if workspace is not None and workspace.device != dev:
            raise UnsupportedLayoutError("workspace device", str(dev), str(workspace.device))
        tensors = {
            "qo_indptr": query_start_loc[: batch + 1],
            "kv_indptr": (
                workspace.row_starts(row, batch)
                if workspace is not None
                else torch.arange(0, (batch + 1) * row, row, **i32)
            ),
            # Row b of the table is request b's page list, read in place through kv_indptr[b] = b * row.
            "kv_indices": block_table.as_strided(((batch - 1) * row + block_table.shape[1],), (1,)),
            "kv_len": seq_lens[:batch],
        }
        if mode == "decode":
            n_prog = -(-batch // config.reqs_per_program) * config.splits
            unused = workspace.unused if workspace is not None else torch.zeros(1, **i32)
            tensors["tile_req"] = tensors["tile_row"] = unused
        else:
            tile_req, tile_row = _prefill_tiles(list(query_lens), bound, group, config.block_m, cartridge_len, causal)
            tensors["tile_req"] = tile_req.to(**i32, non_blocking=True)
            tensors["tile_row"] = tile_row.to(**i32, non_blocking=True)
            n_prog = tile_req.numel()
        if workspace is not None:
            tensors.update(workspace.split_views(config, batch))
        else:
            tensors.update(_split_workspace(config, batch, num_kv_heads, num_qo_heads, head_dim, dev))
        self._plan = Plan(
            mode=mode,
            batch=batch,
            total_q=batch if mode == "decode" else sum(query_lens),  # decode: one row per request, padding too
            max_live=max_seq_len,
            num_qo_heads=num_qo_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            page_size=page_size,
            cartridge_len=cartridge_len,
            q_dtype=q_dtype,
            cartridge_v_dtype=cartridge_v_dtype,
            live_v_dtype=live_v_dtype,
            causal=causal,
            sm_scale=float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(head_dim),
            config=config,
            grid=(n_prog, num_kv_heads),
            max_page_index=-1,
            device=dev,
            tensors=tensors,
        )
        return self._plan

    @staticmethod
    def _check_config(cfg: K.KernelConfig, mode: str, group: int) -> None:
        def pow2(x: int) -> bool:
            return x > 0 and x & (x - 1) == 0

        if not (pow2(cfg.block_m) and pow2(cfg.block_n) and cfg.block_m >= 16 and cfg.block_n >= 16):
            raise UnsupportedLayoutError("config block sizes", "powers of two >= 16", f"{cfg.block_m}x{cfg.block_n}")
        if mode == "decode":
            r = cfg.reqs_per_program
            k = cfg.splits
            if not pow2(k) or k > K.DECODE_SPLIT_MAX:
                raise UnsupportedLayoutError("decode config splits", f"a power of two <= {K.DECODE_SPLIT_MAX}",
                                             cfg.as_dict())  # fmt: skip
            if not pow2(r) or r * group > cfg.block_m or cfg.block_n % r or cfg.block_n // r < 16:
                raise UnsupportedLayoutError(
                    "decode config",
                    "reqs_per_program a power of two, reqs*group <= block_m, block_n/reqs >= 16",
                    cfg.as_dict(),
                )
            if cfg.cartridge_tma:
                raise UnsupportedLayoutError("decode config cartridge_tma", "False (a prefill option)", True)
        elif cfg.reqs_per_program != 1 or cfg.splits != 1 or cfg.cart_rows:
            raise UnsupportedLayoutError(
                "prefill config reqs_per_program / splits / cart_rows", "1 / 1 / 0", cfg.as_dict()
            )

    # -----------------------------------------------------------------------------------------------
    def _scale(
        self, name: str, scale: torch.Tensor | float | None, is_fp8: bool, h_kv: int, dev: torch.device
    ) -> torch.Tensor:
        if scale is None:
            key = (dev, h_kv)
            if key not in self._ones:
                self._ones[key] = torch.ones(h_kv, dtype=torch.float32, device=dev)
            return self._ones[key]
        if not is_fp8:
            raise UnsupportedLayoutError(name, "None (a scale applies only to FP8 E4M3 values)", "a scale")
        if isinstance(scale, (int, float)):
            return torch.full((h_kv,), float(scale), dtype=torch.float32, device=dev)
        if scale.numel() == 1:
            return scale.reshape(1).to(device=dev, dtype=torch.float32).expand(h_kv).contiguous()
        if scale.shape != (h_kv,):
            raise UnsupportedLayoutError(name, f"a scalar or shape ({h_kv},)", tuple(scale.shape))
        return scale.to(device=dev, dtype=torch.float32).contiguous()

    @staticmethod
    def _check_tensor(name: str, t: torch.Tensor, shape: tuple, dtype: torch.dtype, dev: torch.device) -> None:
        if not isinstance(t, torch.Tensor):
            raise UnsupportedLayoutError(name, "a torch.Tensor", type(t).__name__)
        if t.dtype != dtype:
            extra = " (FP8 keys are not supported)" if "K" in name and t.dtype.itemsize == 1 else ""
            raise UnsupportedLayoutError(f"{name} dtype", f"{_dtype_name(dtype)}{extra}", _dtype_name(t.dtype))
        if tuple(t.shape) != tuple(shape):
            raise UnsupportedLayoutError(f"{name} shape", str(tuple(shape)), tuple(t.shape))
        if t.device != dev:
            raise UnsupportedLayoutError(f"{name} device", str(dev), str(t.device))
        if t.stride(-1) != 1:
            raise UnsupportedLayoutError(f"{name} innermost stride", "1 (head_dim contiguous)", t.stride(-1))

    def check_layer(
        self,
        cartridge_k: torch.Tensor,
        cartridge_v: torch.Tensor,
        paged_kv: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        *,
        cartridge_v_scale: torch.Tensor | float | None = None,
        live_v_scale: torch.Tensor | float | None = None,
        q: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
        direct_launch: bool = False,
    ) -> LayerOperands:
        """Check one layer's cartridge and cache tensors against the current plan, once.

        The result serves every later plan with the same ``Plan.operand_signature`` (:meth:`run_layer`).
        Arguments are as for :meth:`run`; ``q`` and ``out``, when given, are the engine's query and output
        buffers, checked for head count, head dim, dtype and device (their row count changes per step). With
        ``direct_launch``, :meth:`run_layer` launches a specialization it launched before without Triton's per-call
        binding (`cartridge_attn.launch.DirectLaunches`).
        """
        p = self.plan_info
        dev = p.device
        for name, t in (("q", q), ("out", out)):
            if t is not None:
                rows = t.shape[0] if t.dim() == 3 else -1
                self._check_tensor(name, t, (rows, p.num_qo_heads, p.head_dim), p.q_dtype, dev)
        if isinstance(paged_kv, torch.Tensor):
            live_k, live_v = split_combined_kv(paged_kv)
        else:
            if len(paged_kv) != 2:
                raise UnsupportedLayoutError(
                    "paged_kv", "(k_pages, v_pages) or a 5-D combined tensor", f"{len(paged_kv)} items"
                )
            live_k, live_v = paged_kv
        h_kv, d, t_c, ps = p.num_kv_heads, p.head_dim, p.cartridge_len, p.page_size
        self._check_tensor("cartridge K", cartridge_k, (t_c, h_kv, d), p.q_dtype, dev)
        self._check_tensor("cartridge V", cartridge_v, (t_c, h_kv, d), p.cartridge_v_dtype, dev)
        if live_k.dim() != 4:
            raise UnsupportedLayoutError("live K pages", "4-D (num_pages, page_size, H_kv, D) NHD", tuple(live_k.shape))
        n_pages = int(live_k.shape[0])
        self._check_tensor("live K pages", live_k, (n_pages, ps, h_kv, d), p.q_dtype, dev)
        self._check_tensor("live V pages", live_v, (n_pages, ps, h_kv, d), p.live_v_dtype, dev)
        return LayerOperands(
            cartridge_k=cartridge_k,
            cartridge_v=cartridge_v,
            cartridge_v_scale=self._scale(
                "cartridge_v_scale", cartridge_v_scale, p.cartridge_v_dtype == K.FP8_DTYPE, h_kv, dev
            ),
            live_k=live_k,
            live_v=live_v,
            live_v_scale=self._scale("live_v_scale", live_v_scale, p.live_v_dtype == K.FP8_DTYPE, h_kv, dev),
            num_pages=n_pages,
            signature=p.operand_signature,
            launches=DirectLaunches(K.cartridge_attn_kernel) if direct_launch else None,
            cascade_launches=DirectLaunches(cartridge_cascade_kernel) if direct_launch else None,
            # Only where this process builds the Gluon prefill: its module needs Triton 3.6's Gluon to import.
            gluon_launches=(
                gluon_host.direct_launches() if direct_launch and gluon_host.gluon_problem() is None else None
            ),
        )

    def run(
        self,
        q: torch.Tensor,
        cartridge_k: torch.Tensor,
        cartridge_v: torch.Tensor,
        paged_kv: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        *,
        cartridge_v_scale: torch.Tensor | float | None = None,
        live_v_scale: torch.Tensor | float | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Launch the fused kernel once, checking the layer's operands anew (:meth:`check_layer`): a loop over
        steps keeps them and calls :meth:`run_layer`, as serving does. (With the Gluon prefill over an FP8
        cartridge, each call here also remakes the cartridge's FP16 expansion.)

        Parameters
        ----------
        q : torch.Tensor
            ``(total_q, H_q, D)`` in the planned ``q_dtype``.
        cartridge_k : torch.Tensor
            ``(T_c, H_kv, D)``, ``q_dtype``.
        cartridge_v : torch.Tensor
            ``(T_c, H_kv, D)``, the planned cartridge V dtype (FP8 E4M3 by default).
        paged_kv : torch.Tensor or tuple of torch.Tensor
            Live pages: ``(k, v)``, each ``(num_pages, page_size, H_kv, D)`` (vLLM), or FlashInfer's combined
            ``(num_pages, 2, page_size, H_kv, D)`` (K and V then share a dtype). Any page stride.
        cartridge_v_scale, live_v_scale : torch.Tensor, float or None
            Per-KV-head scale ``(H_kv,)`` (or a scalar) for FP8 values; None means 1.
        out : torch.Tensor or None
            Caller-owned ``(total_q, H_q, D)`` output in ``q_dtype``; allocated when None.

        Returns
        -------
        torch.Tensor
            ``out``, ``(total_q, H_q, D)``.
        """
        p = self.plan_info
        self._check_tensor("q", q, (p.total_q, p.num_qo_heads, p.head_dim), p.q_dtype, p.device)
        layer = self.check_layer(
            cartridge_k, cartridge_v, paged_kv, cartridge_v_scale=cartridge_v_scale, live_v_scale=live_v_scale
        )
        if out is None:
            out = torch.empty((p.total_q, p.num_qo_heads, p.head_dim), dtype=p.q_dtype, device=p.device)
        else:
            self._check_tensor("out", out, (p.total_q, p.num_qo_heads, p.head_dim), p.q_dtype, p.device)
        return self.run_layer(q, layer, out)

    def run_layer(self, q: torch.Tensor, layer: LayerOperands, out: torch.Tensor) -> torch.Tensor:
        """Launch the fused kernel once over operands that :meth:`check_layer` checked.

        ``q`` and ``out`` are ``(total_q, H_q, D)`` views of the engine's own buffers, in the layout and dtype
        of the query the operands were checked with (a serving engine's are fixed for its lifetime); only their
        row count is checked here, with what a new plan can change.
        """
        p = self.plan_info
        if layer.signature != p.operand_signature:
            raise UnsupportedLayoutError("layer operands", f"checked for {p.operand_signature}", layer.signature)
        if p.max_page_index >= layer.num_pages:
            want = f"page numbers < num_pages = {layer.num_pages}"
            raise UnsupportedLayoutError("kv_indices", want, p.max_page_index)
        if q.shape[0] != p.total_q or out.shape[0] != p.total_q:
            raise UnsupportedLayoutError("q / out rows", str(p.total_q), (q.shape[0], out.shape[0]))
        cfg = p.config
        qk_scale = p.sm_scale * _LOG2E  # exp2 in the kernels: log2(e) folded into the scale once
        if cfg.impl == "gluon":
            cart_v, scaled = layer.cartridge_v, layer.cartridge_v.dtype == K.FP8_DTYPE
            if scaled:
                cart_v = layer.cartridge_v16.get(cart_v)
            # The expansion keeps its address while the operands live (it is remade in place).
            key = ("gluon", cfg.block_n, p.page_size)
            if key not in layer.descriptors:
                layer.descriptors[key] = gluon_host.descriptors(
                    layer.cartridge_k, cart_v, layer.live_k, layer.live_v, cfg.block_n, p.page_size
                )
            self.last_compiled = gluon_host.launch(
                cfg, p.grid, group=p.num_qo_heads // p.num_kv_heads, head_dim=p.head_dim, page_size=p.page_size,
                causal=p.causal, cartridge_len=p.cartridge_len, qk_scale=qk_scale, q=q, out=out,
                descs=layer.descriptors[key], cartridge_v_scale=layer.cartridge_v_scale,
                live_v_scale=layer.live_v_scale, plan_tensors=p.tensors, cartridge_v_scaled=scaled,
                launches=layer.gluon_launches,
            )  # fmt: skip
            return out
        t = p.tensors
        ck, cv, live_k, live_v = layer.cartridge_k, layer.cartridge_v, layer.live_k, layer.live_v
        ck_desc, cv_desc = layer.cartridge_descriptors(cfg.block_n) if cfg.cartridge_tma else (None, None)
        plan_tensors = (
            t["qo_indptr"], t["kv_indptr"], t["kv_indices"], t["kv_len"], t["tile_req"], t["tile_row"],
            t["split_o"], t["split_ml"], t["split_count"], t["cart_o"], t["cart_ml"],
        )  # fmt: skip
        # The interpreter (and a GPU before SM90) has no grid dependency control: there the live walk follows the
        # cascade, as it does without cart_pdl, with the same sums.
        pdl = cfg.cart_pdl and not K.INTERPRETED and _has_grid_dependency_control(q.device)
        self.last_cascade_compiled = self._launch_cascade(q, layer, cfg, qk_scale, pdl) if cfg.cart_rows else None
        args = (
            q, out, ck, cv, ck_desc, cv_desc, layer.cartridge_v_scale, live_k, live_v, layer.live_v_scale,
            *plan_tensors,
            p.batch, p.cartridge_len, qk_scale,
            q.stride(0), q.stride(1), out.stride(0), out.stride(1),
            ck.stride(0), ck.stride(1), cv.stride(0), cv.stride(1),
            live_k.stride(0), live_k.stride(1), live_k.stride(2),
            live_v.stride(0), live_v.stride(1), live_v.stride(2),
        )  # fmt: skip
        constexprs = {
            "GROUP": p.num_qo_heads // p.num_kv_heads, "HEAD_DIM": p.head_dim, "PAGE": p.page_size,
            "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "REQS": cfg.reqs_per_program,
            "DECODE": p.mode == "decode", "CAUSAL": p.causal,
            "CV_FP8": p.cartridge_v_dtype == K.FP8_DTYPE, "LV_FP8": p.live_v_dtype == K.FP8_DTYPE,
            "DOT_F32": K.INTERPRETED, "SPLITS": cfg.splits, "WARP_SPEC": cfg.warp_specialize,
            "CART_TMA": cfg.cartridge_tma, "CART_STATES": cfg.cart_splits if cfg.cart_rows else 0,
            "CART_PDL": pdl,
        }  # fmt: skip
        options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        if pdl:
            options["launch_pdl"] = True
        if layer.launches is None:
            self.last_compiled = K.cartridge_attn_kernel[p.grid](*args, **constexprs, **options)
            return out
        # What can change between this layer's calls and Triton specializes on; the operands' tensors, strides
        # and the cartridge length are the layer's own (fixed while the operands live), and the batch is not
        # specialized (the kernel's do_not_specialize).
        key = (
            cfg, p.mode, p.causal,
            q.stride(0), q.stride(1), out.stride(0), out.stride(1), *pointer_specialization((q, out, *plan_tensors)),
        )  # fmt: skip
        self.last_compiled = layer.launches.launch(p.grid, key, args, constexprs, options)
        return out

    def _launch_cascade(
        self, q: torch.Tensor, layer: LayerOperands, cfg: K.KernelConfig, qk_scale: float, pdl: bool
    ) -> Any:
        """A decode cascade's first launch: every request's rows over the cartridge, into the plan's states; with
        ``pdl``, letting the live walk launch as soon as every program has begun."""
        p = self.plan_info
        t = p.tensors
        group = p.num_qo_heads // p.num_kv_heads
        ck, cv = layer.cartridge_k, layer.cartridge_v
        grid = (-(-p.batch * group // cfg.cart_rows), p.num_kv_heads, cfg.cart_splits)
        args = (
            q, ck, cv, layer.cartridge_v_scale, t["cart_o"], t["cart_ml"], p.batch, p.cartridge_len, qk_scale,
            q.stride(0), q.stride(1), ck.stride(0), ck.stride(1), cv.stride(0), cv.stride(1),
        )  # fmt: skip
        constexprs = {
            "GROUP": group, "HEAD_DIM": p.head_dim, "BLOCK_M": cfg.cart_rows, "BLOCK_N": K.CASCADE_BLOCK_N,
            "CART_SPLITS": cfg.cart_splits, "CV_FP8": p.cartridge_v_dtype == K.FP8_DTYPE, "DOT_F32": K.INTERPRETED,
            "LAUNCH_DEPENDENTS": pdl,
        }  # fmt: skip
        options = {"num_warps": max(4, cfg.cart_rows // 16), "num_stages": 2}
        if layer.cascade_launches is None:
            return cartridge_cascade_kernel[grid](*args, **constexprs, **options)
        key = (cfg, q.stride(0), q.stride(1), *pointer_specialization((q, t["cart_o"], t["cart_ml"])))
        return layer.cascade_launches.launch(grid, key, args, constexprs, options)
