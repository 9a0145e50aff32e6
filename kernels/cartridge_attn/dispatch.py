"""The kernel's dispatch as data: every launch configuration the default heuristics choose inside an envelope,
the region of inputs that chooses each, and the identity of a compiled variant.

The regions come from evaluating the heuristics themselves (`decode_config`, `prefill_config`) once per interval
between the breakpoints they are written against (the thresholds named in `_kernel`), so the table cannot drift
from what `CartridgeAttention.plan` launches; tests/kernels/test_dispatch.py checks it against every input of an
envelope, point by point. A numerics gate qualifies what ships by reaching every region at its edges.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Protocol

from . import heuristics as K

__all__ = ["Envelope", "Region", "Specialization", "dispatch_table", "specialization_of"]

Mode = Literal["decode", "prefill"]


@dataclass(frozen=True)
class Envelope:
    """The serving shapes a release must cover: GQA groups and head dims, and the largest batch and lengths."""

    groups: tuple[int, ...] = K.SUPPORTED_GROUPS
    head_dims: tuple[int, ...] = K.SUPPORTED_HEAD_DIMS
    num_kv_heads: tuple[int, ...] = (8,)
    cartridge_lens: tuple[int, ...] = (632,)  # decode splits depend on the keys a request holds
    max_batch: int = 256  # decode: requests in one step
    max_live: int = 4096  # decode: the longest live suffix, this step's token included
    max_query_tokens: int = 8192  # prefill: query tokens in one batch, all requests together

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_live", "max_query_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"envelope {name} must be at least 1")
        bad = [g for g in self.groups if g not in K.SUPPORTED_GROUPS]
        if bad or any(d not in K.SUPPORTED_HEAD_DIMS for d in self.head_dims):
            raise ValueError(f"envelope outside the kernel's support: groups {self.groups}, head_dims {self.head_dims}")


@dataclass(frozen=True)
class Region:
    """One configuration and the inputs (inclusive ranges) that choose it.

    Decode regions range over `batch` and `max_live`; prefill regions over `query_rows` (query tokens x group,
    all requests together) for one `num_kv_heads`. The other pair is None.
    """

    mode: Mode
    group: int
    head_dim: int
    config: K.KernelConfig
    batch: tuple[int, int] | None = None
    max_live: tuple[int, int] | None = None
    query_rows: tuple[int, int] | None = None
    num_kv_heads: int | None = None
    cartridge_len: int | None = None  # decode: the cartridge the split count was chosen for

    def contains(
        self, *, batch: int = 0, max_live: int = 0, query_rows: int = 0, num_kv_heads: int = 0,
        cartridge_len: int | None = None,
    ) -> bool:  # fmt: skip
        if self.mode == "decode":
            assert self.batch is not None and self.max_live is not None
            same = (self.num_kv_heads, self.cartridge_len) == (num_kv_heads or self.num_kv_heads, cartridge_len)
            return same and self.batch[0] <= batch <= self.batch[1] and self.max_live[0] <= max_live <= self.max_live[1]
        assert self.query_rows is not None
        return self.num_kv_heads == num_kv_heads and self.query_rows[0] <= query_rows <= self.query_rows[1]

    def edge_inputs(self) -> list[dict[str, int]]:
        """The corners of the region: where a neighbouring configuration takes over, and the envelope's maxima."""
        if self.mode == "decode":
            assert self.batch is not None and self.max_live is not None
            pts = {(b, n) for b in self.batch for n in self.max_live}
            return [{"batch": b, "max_live": n} for b, n in sorted(pts)]
        assert self.query_rows is not None
        # Rows come in whole tokens of `group` rows: the first token count whose rows reach the region, the last
        # whose rows stay in it.
        first, last = -(-self.query_rows[0] // self.group), self.query_rows[1] // self.group
        return [{"query_tokens": t, "num_kv_heads": int(self.num_kv_heads or 0)} for t in sorted({first, last})
                if first <= last]  # fmt: skip


def _intervals(lo: int, hi: int, cuts: set[int]) -> list[tuple[int, int]]:
    """[lo, hi] split so that every cut inside starts a new interval."""
    starts = sorted({lo, *(c for c in cuts if lo < c <= hi)})
    return [(s, (starts[i + 1] - 1) if i + 1 < len(starts) else hi) for i, s in enumerate(starts)]


def _merge(regions: list[Region], axis: str, other: str) -> list[Region]:
    """Join neighbours along `axis` that share the configuration and the `other` range."""
    out: list[Region] = []
    for r in sorted(regions, key=lambda r: (getattr(r, other), getattr(r, axis))):
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev.config == r.config
            and getattr(prev, other) == getattr(r, other)
            and getattr(prev, axis)[1] + 1 == getattr(r, axis)[0]
        ):
            out[-1] = replace(prev, **{axis: (getattr(prev, axis)[0], getattr(r, axis)[1])})
        else:
            out.append(r)
    return out


def _split_cuts(num_kv_heads: int, cartridge_len: int) -> tuple[set[int], set[int]]:
    """Batches and live lengths at which the split configuration can change: every batch whose grid is still
    smaller than the SMs (the count is a ceiling in the batch), the lengths where the keys reach another power of
    two of split ranges, and those where a range outgrows one 64-key tile."""
    batches = set(range(2, -(-K.GPU_SMS // num_kv_heads) + 2))
    powers = [1 << k for k in range(1, K.DECODE_SPLIT_MAX.bit_length())]
    lives = {K.DECODE_SPLIT_KEYS * s - cartridge_len for s in powers}
    # Past this many keys per range the split's tiles widen from 64 to 128 keys.
    lives |= {K.DECODE_SPLIT_NARROW_KEYS * s - cartridge_len + 1 for s in powers}
    return batches, {n for n in lives if n > 1}


def decode_regions(
    group: int,
    head_dim: int,
    max_batch: int,
    max_live: int,
    num_kv_heads: int = 8,
    cartridge_len: int | None = None,
    cascade: bool | None = None,
) -> list[Region]:
    """Decode regions over (batch, max_live); with `cartridge_len`, also where the split count changes. `cascade`
    is the wrapper's `decode_cascade`: None for the default dispatch, True or False to force it on or off."""
    batch_cuts = {K.DECODE_WIDE_MAX_BATCH + 1, K.DECODE_PACK_MIN_BATCH}
    live_cuts = {K.DECODE_WIDE_MIN_LIVE}
    if cartridge_len is not None:
        more_b, more_l = _split_cuts(num_kv_heads, cartridge_len)
        # In a cascade the fused kernel walks the live pages alone: its splits see no cartridge keys.
        cascade_b, cascade_l = _split_cuts(num_kv_heads, 0)
        batch_cuts |= more_b | cascade_b | ({K.CASCADE_MIN_BATCH} if K.CASCADE_MIN_BATCH is not None else set())
        live_cuts |= more_l | cascade_l | {K.CASCADE_UNPACKED_MAX_LIVE + 1}
    cart_rows = K.cascade_rows(cascade)

    def config(b: int, n: int) -> K.KernelConfig:
        return K.decode_config(
            group, head_dim, b, n, num_kv_heads=num_kv_heads, cartridge_len=cartridge_len, cart_rows=cart_rows
        )

    cells = [
        Region(
            "decode",
            group,
            head_dim,
            config(b0, n0),
            batch=(b0, b1),
            max_live=(n0, n1),
            num_kv_heads=num_kv_heads,
            cartridge_len=cartridge_len,
        )
        for b0, b1 in _intervals(1, max_batch, batch_cuts)
        for n0, n1 in _intervals(1, max_live, live_cuts)
    ]
    return _merge(_merge(cells, "max_live", "batch"), "batch", "max_live")


def prefill_regions(
    group: int, head_dim: int, num_kv_heads: int, max_query_tokens: int, impl: str = "triton", live_v_bits: int = 16
) -> list[Region]:
    """The prefill regions of ``impl``'s default configuration for live values of ``live_v_bits`` (the Gluon
    prefill's ring depth depends on them, not its regions' edges)."""
    # The small-grid tiles end once (rows // 128) * H_kv reaches the implementation's program count, i.e. at this
    # many rows; the Gluon prefill's two-per-SM tiles end past GLUON_TWO_PER_SM_MAX_ROWS. A cut where nothing
    # changes (the Triton prefill's second, any other head_dim's) leaves neighbours that merge into one region.
    cuts = {128 * -(-K.prefill_grid_sms(impl) // num_kv_heads), K.GLUON_TWO_PER_SM_MAX_ROWS + 1}
    cells = [
        Region(
            "prefill",
            group,
            head_dim,
            K.prefill_config(group, head_dim, rows=r0, num_kv_heads=num_kv_heads, impl=impl, live_v_bits=live_v_bits),
            query_rows=(r0, r1),
            num_kv_heads=num_kv_heads,
        )
        # From two query tokens: a batch of one query in all is a decode launch (every request has one query).
        for r0, r1 in _intervals(2 * group, max_query_tokens * group, cuts)
    ]
    return _merge(cells, "query_rows", "num_kv_heads")


def dispatch_table(
    envelope: Envelope | None = None, prefill_impl: str = "triton", live_v_bits: int = 16
) -> list[Region]:
    """Every region of the default dispatch inside `envelope` (the default envelope when None), its prefill
    regions those of `prefill_impl` for live values of `live_v_bits`: the dispatch's on a device is
    `api.default_prefill_impl` (the Gluon kernel on SM90 with Triton 3.6, the Triton kernel elsewhere)."""
    e = envelope or Envelope()
    table: list[Region] = []
    for group in e.groups:
        for head_dim in e.head_dims:
            for h_kv in e.num_kv_heads:
                for t_c in e.cartridge_lens:
                    table += decode_regions(group, head_dim, e.max_batch, e.max_live, h_kv, t_c)
                table += prefill_regions(group, head_dim, h_kv, e.max_query_tokens, prefill_impl, live_v_bits)
    return table


def _dtype(dt: object) -> str:
    return str(dt).removeprefix("torch.")


@dataclass(frozen=True, order=True)
class Specialization:
    """One compiled variant of the kernel: the constexprs and launch options that select its binary."""

    mode: str
    q_dtype: str
    group: int
    head_dim: int
    page_size: int
    causal: bool
    cartridge_v: str
    live_v: str
    block_m: int
    block_n: int
    reqs_per_program: int
    num_warps: int
    num_stages: int
    splits: int = 1
    warp_specialize: bool = False
    cartridge_tma: bool = False
    impl: str = "triton"
    cart_rows: int = 0
    cart_splits: int = 1
    cart_pdl: bool = False
    persistent: bool = False

    @property
    def key(self) -> str:
        """A stable name, e.g. ``decode/bfloat16/g4/d128/p8/causal/cv-float8_e4m3fn/lv-bfloat16/m16n128r1w4s3``."""
        return (
            f"{self.mode}/{self.q_dtype}/g{self.group}/d{self.head_dim}/p{self.page_size}/"
            f"{'causal' if self.causal else 'full'}/cv-{self.cartridge_v}/lv-{self.live_v}/{self.config.tag}"
        )

    @property
    def config(self) -> K.KernelConfig:
        return K.KernelConfig(
            self.block_m, self.block_n, self.reqs_per_program, self.num_warps, self.num_stages, self.splits,
            self.warp_specialize, self.cartridge_tma, self.impl, self.cart_rows, self.cart_splits,
            self.cart_pdl, self.persistent,
        )  # fmt: skip


class PlannedLaunch(Protocol):
    """What `specialization_of` reads of a plan (`api.Plan`), named here so that the dispatch, which the workspace
    sizes its buffers from, needs nothing of the module that plans."""

    config: K.KernelConfig
    mode: str
    q_dtype: object
    cartridge_v_dtype: object
    live_v_dtype: object
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    causal: bool


def specialization_of(plan: PlannedLaunch) -> Specialization:
    """The compiled variant a planned launch uses (the interpreter is not part of it)."""
    c = plan.config
    return Specialization(
        mode=plan.mode,
        q_dtype=_dtype(plan.q_dtype),
        group=plan.num_qo_heads // plan.num_kv_heads,
        head_dim=plan.head_dim,
        page_size=plan.page_size,
        causal=plan.causal,
        cartridge_v=_dtype(plan.cartridge_v_dtype),
        live_v=_dtype(plan.live_v_dtype),
        block_m=c.block_m,
        block_n=c.block_n,
        reqs_per_program=c.reqs_per_program,
        num_warps=c.num_warps,
        num_stages=c.num_stages,
        splits=c.splits,
        warp_specialize=c.warp_specialize,
        cartridge_tma=c.cartridge_tma,
        impl=c.impl,
        cart_rows=c.cart_rows,
        cart_splits=c.cart_splits,
        cart_pdl=c.cart_pdl,
        persistent=c.persistent,
    )
