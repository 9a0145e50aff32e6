"""The fused kernel's launch configurations and the default heuristics that choose them (no torch, no triton).

Kept apart from the kernel so that a gate file's envelope can be expanded into cells, and linted, against the
dispatch without importing torch or triton; `_kernel` re-exports every name here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

# ---------------------------------------------------------------------------------------------------
# What the specialization covers. Anything else is rejected by the API, never sent to a fallback.
# ---------------------------------------------------------------------------------------------------
QUALIFIED_ARCHS: tuple[tuple[int, int], ...] = ((9, 0),)
SUPPORTED_HEAD_DIMS: tuple[int, ...] = (64, 128)
SUPPORTED_PAGE_SIZES: tuple[int, ...] = (8, 16)
# Any GQA group up to 16: the query rows of a KV head are padded to the tile (a power of two) and the padding masked.
SUPPORTED_GROUPS: tuple[int, ...] = tuple(range(1, 17))


# ---------------------------------------------------------------------------------------------------
# Configurations.
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelConfig:
    """Launch configuration of the fused kernel.

    Attributes
    ----------
    block_m : int
        Rows per program (query tokens x GQA heads in prefill, requests x heads in decode).
    block_n : int
        Key positions per tile (in decode, shared by ``reqs_per_program`` requests in the live loop).
    reqs_per_program : int
        Decode only: requests packed into one program; 1 for prefill.
    num_warps : int
        Warps per program.
    num_stages : int
        Software-pipelining depth of the K/V loads.
    splits : int
        Decode only: programs sharing one (request, KV head), each over its own range of cartridge + live keys;
        the last to finish combines their online-softmax states (flash-decoding). 1: no split.
    warp_specialize : bool
        Prefill only: Triton's warp specialization of the unmasked cartridge and live loops (on SM90 a producer
        warpgroup loads while two consumer warpgroups split the tile's rows), so that softmax and tensor-core work
        overlap. Triton 3.6 specializes 4-warp kernels only, so it needs ``num_warps`` 4.
    cartridge_tma : bool
        Prefill only: the dense cartridge's full tiles come through Hopper's tensor memory accelerator (host-built
        TMA descriptors) instead of per-thread pointer gathers, which frees the address registers and issue slots
        of the cartridge loop; the paged live suffix keeps its gathers (a page is smaller than a tile). The
        cartridge's heads must then be ``head_dim`` apart (``stride(1) == head_dim``) and 16-byte aligned.
    cart_rows : int
        Decode only: 0, or the query rows per tile of the cascade launch (`_cascade`) that attends every request
        over the cartridge before the fused kernel walks the live pages from its states; a power of two, 16 to
        128 (4 warps per 64 rows).
    cart_splits : int
        Decode only, with ``cart_rows``: the cascade's programs per row tile, each over its own range of the
        cartridge.
    cart_pdl : bool
        Decode only, with ``cart_rows``: the live walk is launched as a programmatic dependent of the cascade
        (SM90 programmatic dependent launch) so that the two run at once; it reads the cascade's states only at
        its end, after waiting for that launch. False: it starts when the cascade has ended (the same sums).
    impl : str
        ``"triton"``: the Triton kernel (`_kernel`). ``"gluon"``: prefill only, the warp-specialized Gluon kernel
        (`_gluon_prefill`): a TMA producer warp and ``block_m // 64`` consumer warpgroups; ``num_warps`` is then
        the 4 warps of one consumer, ``block_m`` 64 or 128, ``block_n`` 64 or 128, ``num_stages`` its ring depth.
    persistent : bool
        Gluon prefill only: a persistent grid, as many programs as the GPU holds at once, each walking (tile, KV
        head) work items in strides, its rings running on from one item to the next. False: one program per item.
    """

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

    def __post_init__(self) -> None:
        if self.impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}: {self}")
        if self.impl == "gluon" and (
            self.reqs_per_program != 1 or self.splits != 1 or self.warp_specialize or self.cartridge_tma
            or self.num_warps != 4 or self.block_m not in (64, 128) or self.block_n not in (64, 128)
            or self.num_stages < 2
        ):  # fmt: skip
            raise ValueError(
                "the gluon prefill takes one request per program, no split, its own warp specialization and TMA, "
                f"4 warps per consumer, block_m and block_n 64 or 128 and at least 2 stages: {self}"
            )
        # Triton would compile any other combination without specializing: the name would claim what did not run.
        if self.warp_specialize and (self.num_warps != 4 or self.reqs_per_program != 1 or self.splits != 1):
            raise ValueError(f"warp_specialize needs 4 warps, one request per program and no split: {self}")
        if self.cartridge_tma and (self.reqs_per_program != 1 or self.splits != 1):
            raise ValueError(f"cartridge_tma is a prefill option (one request per program, no split): {self}")
        if self.cart_rows and (
            self.cart_rows not in CASCADE_ROWS or not 1 <= self.cart_splits <= CASCADE_SPLITS_MAX
            or self.impl != "triton" or self.warp_specialize or self.cartridge_tma
        ):  # fmt: skip
            raise ValueError(
                f"a decode cascade takes cart_rows in {CASCADE_ROWS} and 1 to {CASCADE_SPLITS_MAX} cart_splits, "
                f"on the Triton kernel without prefill options: {self}"
            )
        if self.persistent and self.impl != "gluon":
            raise ValueError(f"a persistent grid is a Gluon prefill option: {self}")
        if not self.cart_rows and (self.cart_splits != 1 or self.cart_pdl):
            raise ValueError(f"cart_splits or cart_pdl without cart_rows: {self}")

    def as_dict(self) -> dict[str, int | bool]:
        return asdict(self)

    @property
    def tag(self) -> str:
        """A short name, e.g. ``m16n128r2w4s3`` (block_m, block_n, reqs_per_program, warps, stages), ``k4``
        appended for 4 splits, ``c64x5`` for a decode cascade of 64-row tiles over 5 cartridge ranges (``c64x5p``
        with the live walk a programmatic dependent launch), ``tma`` for
        TMA cartridge loads, ``ws`` for warp specialization, ``gl`` for the Gluon implementation and ``glp`` for it on a
        persistent grid."""
        split = f"k{self.splits}" if self.splits > 1 else ""
        tma = "tma" if self.cartridge_tma else ""
        ws = "ws" if self.warp_specialize else ""
        gl = ("glp" if self.persistent else "gl") if self.impl == "gluon" else ""
        cascade = f"c{self.cart_rows}x{self.cart_splits}{'p' if self.cart_pdl else ''}" if self.cart_rows else ""
        shape = f"m{self.block_m}n{self.block_n}r{self.reqs_per_program}w{self.num_warps}s{self.num_stages}"
        return f"{shape}{split}{cascade}{tma}{ws}{gl}"


# The prefill implementations. The dispatch takes the Gluon one wherever it runs (an SM90 device with Triton 3.6): it
# took 67-83 % of the Triton prefill's time at every perf point and passes the same numerics and mutation gates
# (results/2026-12-06-gluon-expansion-h100); the Triton one elsewhere. A wrapper may name either
# (CartridgeAttention(prefill_impl=...)); False here would give the Triton one everywhere.
IMPLS: tuple[str, ...] = ("triton", "gluon")
GLUON_PREFILL_BY_DEFAULT = True
GLUON_CAPABILITY = (9, 0)  # the architecture the Gluon prefill is written for (wgmma, TMA, setmaxnreg)


def default_prefill_impl(capability: tuple[int, int] | None, gluon_problem: str | None) -> str:
    """The prefill the dispatch takes on a device of compute ``capability`` (None: no CUDA device, or the Triton
    interpreter) where ``gluon_problem`` says why this process cannot build the Gluon kernel (None: it can)."""
    runs = capability == GLUON_CAPABILITY and gluon_problem is None
    return "gluon" if GLUON_PREFILL_BY_DEFAULT and runs else "triton"


# SM90's largest shared-memory allocation per CTA (227 KiB), which the Gluon prefill's stage ring must fit.
SM90_SHARED_BYTES = 232448
# An SM's shared memory, of which each resident program also takes a reserved KiB: what programs sharing it must fit.
SM90_SHARED_BYTES_PER_SM = 233472
SM90_SHARED_BYTES_RESERVED = 1024
# Barriers and the compiler's layout-conversion scratch on top of the Gluon prefill's buffers: at most 520 bytes over
# every configuration tests/gluon builds (Triton 3.6), which checks the bound.
GLUON_SHARED_SLACK = 2 * 1024


# The inputs at which the default configurations change, named once: the heuristics below read them and
# cartridge_attn.dispatch derives the dispatch table (every configuration and the region choosing it) from them.
DECODE_PACK_MIN_BATCH = 32  # from this batch on, decode packs 2 requests per program
DECODE_WIDE_MAX_BATCH = 4  # up to this batch ...
DECODE_WIDE_MIN_LIVE = 512  # ... and from this live length on, unpacked decode uses wide tiles
GPU_SMS = 132  # the H200's SMs: decode splits each (request, KV head) while batch x H_kv programs leave some idle ...
DECODE_SPLIT_KEYS = 32  # ... into ranges of at least this many cartridge + live keys ...
DECODE_SPLIT_MAX = 16  # ... at most this many, a power of two ...
DECODE_SPLIT_NARROW_KEYS = 64  # ... and a range of at most this many keys takes 64-key tiles, not 128
# From this batch on (with the shape known), the default decode is a cascade whose live walk is its programmatic
# dependent (H100 sweep, results/2026-12-06-pdl-cascade-h100: 1.39x at batch 64 / 128 live, 1.05x at 64 / 1,024,
# 1.17x at 16 / 128); None would leave it to `CartridgeAttention(decode_cascade=True)` and `cart_rows` ...
CASCADE_MIN_BATCH: int | None = 16
# ... below DECODE_PACK_MIN_BATCH only up to this longest live suffix: at batch 16 and 1,024 live tokens the live
# walk alone (128 programs over 1,024 keys each) is longer than the two-way split fused walk over 1,656 (2 % slower)
CASCADE_UNPACKED_MAX_LIVE = 512
CASCADE_DEFAULT_ROWS = 64  # ... of this many query rows per tile ...
CASCADE_RANGE_KEYS = 160  # ... over cartridge ranges of about this many keys
CASCADE_ROWS: tuple[int, ...] = (16, 32, 64, 128)  # the rows per tile a cascade may have ...
CASCADE_SPLITS_MAX = 16  # ... and its most cartridge ranges per row tile
CASCADE_BLOCK_N = 64  # its keys per tile
PREFILL_GRID_SMS = GPU_SMS  # fewer 128-row tiles x KV heads than this: prefill drops to 64-row tiles
# The Gluon prefill drops to 64-row tiles (one consumer warpgroup) only below half of that: two consumers over 128
# rows keep the tensor cores busier than twice the programs (H100 sweep, results/2026-12-06-gluon-overlap-h100:
# batch 1, 512-token suffixes, 128 programs: 31.3 us with 128 rows, 44.8 with 64; 128 tokens, 32 programs: 23.3
# against 19.2).
GLUON_PREFILL_GRID_SMS = GPU_SMS // 2
# Above that, up to this many query rows, the Gluon prefill at head_dim 128 takes 64 x 64 tiles over 2 stages: 82 KB
# of shared memory and 128 registers a thread let two programs share an SM, so that one's prologue (Q and the first
# tiles' loads) and epilogue (the output's stores) overlap the other's main loop. H100 sweep, two runs
# (results/2026-12-06-gluon-two-per-sm-h100): 5.5-6.3 % less time than 128 x 128 tiles at 16 and 64 requests of 128
# tokens (8,192 and 32,768 rows), ties at 1 x 512 and 16 x 512 (2,048 and 32,768 rows), 0.7-1.6 % more at 64 x 512
# (131,072 rows). The persistent 128-row tiles (below) win at 24,576 rows and more, not at 16,384: 128 x 128 persistent
# against 64 x 64 two per SM, H200 sweep (results/2026-12-07-gluon-persistent-pingpong-h200), 64.0 against 60.8 us
# at 16 x 128 (8,192 rows), 222.5 against 235.4 at 64 x 128 and 283.6 against 293.0 at 16 x 512 (32,768); H100 sweep
# (results/2026-12-07-gluon-persistent-cut-h100), 166.7 against 142.0 at 8 x 512 and 119.4 against 119.0 at 32 x 128
# (16,384), and 204.1 against 224.2 at 12 x 512 and 173.2 against 175.4 at 48 x 128 (24,576 rows, so the cut stays;
# results/2026-12-07-gluon-q-tma-h100). Those sweeps ran 2 stages; the third stage the persistent tiles now take
# gained 0.2-3.1 % (results/2026-12-07-gluon-third-stage), far from the 17 % they lose at 8 x 512, so the cut does not
# move down.
GLUON_TWO_PER_SM_MAX_ROWS = 16384
GLUON_TWO_PER_SM_HEAD_DIM = 128  # the head_dim it was measured at
# Past GLUON_TWO_PER_SM_MAX_ROWS (at least 128 x H_kv work items) the 128-row tiles at that head_dim run on a
# persistent grid, their KV heads' items in turn: 4-6 % less time than one program per item at 64 requests of 512
# tokens on an H100 (results/2026-12-07-gluon-persistent-h100, A/B and tile sweep), 6.5 % on an H200
# (results/2026-12-07-gluon-persistent-pingpong-h200, A/B); at fewer items, and for the two-per-SM tiles,
# persistence cost 1-4 % on the H100.


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _pow2_at_most(x: int) -> int:
    return 1 << max(0, x.bit_length() - 1)


def decode_splits(batch: int, num_kv_heads: int, total_keys: int, sms: int = GPU_SMS) -> int:
    """Programs per (request, KV head): enough to fill ``sms`` SMs, each over at least DECODE_SPLIT_KEYS keys."""
    programs = batch * num_kv_heads
    if programs >= sms:
        return 1
    want = -(-sms // programs)
    return _pow2_at_most(max(1, min(want, total_keys // DECODE_SPLIT_KEYS, DECODE_SPLIT_MAX)))


def cascade_rows(decode_cascade: bool | None) -> int | None:
    """``decode_config``'s ``cart_rows`` for a wrapper's ``decode_cascade``: None (the dispatch decides), the
    default rows (always a cascade) or 0 (never)."""
    return None if decode_cascade is None else (CASCADE_DEFAULT_ROWS if decode_cascade else 0)


def cascade_state_rows(config: KernelConfig, batch: int, num_qo_heads: int) -> int:
    """Rows of the states a decode cascade hands from its first launch to its second: one per (request, query head)
    per cartridge range (each ``head_dim`` accumulators, a max and a sum); 0 without a cascade."""
    return batch * num_qo_heads * config.cart_splits if config.cart_rows else 0


def cascade_by_default(batch: int, max_live: int) -> bool:
    """Whether the default decode of ``batch`` requests, the longest with ``max_live`` live tokens, is a cascade
    (when the shape is known)."""
    if CASCADE_MIN_BATCH is None or batch < CASCADE_MIN_BATCH:
        return False
    return batch >= DECODE_PACK_MIN_BATCH or max_live <= CASCADE_UNPACKED_MAX_LIVE


def decode_config(
    group: int,
    head_dim: int,
    batch: int,
    max_live: int,
    *,
    num_kv_heads: int | None = None,
    cartridge_len: int | None = None,
    splits: int | None = None,
    reqs: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    cart_rows: int | None = None,
    cart_splits: int | None = None,
    cart_pdl: bool = True,
) -> KernelConfig:
    """Decode configuration; the defaults follow the H200 sweep recorded in results/2026-11-29-kernel-h200/.

    Packing several requests into one program lets them share each cartridge tile (fewer L2 reads of
    the cartridge) but leaves fewer programs, so it pays only once there are programs enough to fill
    the 132 SMs (batch x H_kv well above 132). With ``num_kv_heads`` and ``cartridge_len`` given, a grid that
    would leave SMs idle splits each request's keys over several programs instead (``decode_splits``); without
    them (or with ``splits=1``) it never splits. A split packs requests only when ``reqs`` says so: then the
    packed requests share each cartridge tile of every range.

    From ``CASCADE_MIN_BATCH`` requests on (with the shape given), or with ``cart_rows``, decode is a cascade
    (`_cascade`): one launch attends every request's rows over the cartridge in tiles of ``cart_rows`` rows (each
    cartridge tile read once per tile of rows, not once per request), split into ``cart_splits`` ranges of about
    ``CASCADE_RANGE_KEYS`` keys; the fused kernel then walks the live pages only, so its split count follows the
    live keys, as a programmatic dependent of the cascade unless ``cart_pdl`` is False. ``cart_rows=0`` turns the
    cascade off.
    """
    shape_known = num_kv_heads is not None and cartridge_len is not None
    if cart_rows is None:
        cart_rows = CASCADE_DEFAULT_ROWS if shape_known and cascade_by_default(batch, max_live) else 0
    cascade = cart_rows
    if cascade:
        if cart_splits is None:
            ranges = -(-(cartridge_len or CASCADE_RANGE_KEYS) // CASCADE_RANGE_KEYS)
            cart_splits = max(1, min(ranges, CASCADE_SPLITS_MAX))
        cartridge_len = 0 if cartridge_len is not None else None
    cfg = _decode_walk_config(
        group, batch, max_live, num_kv_heads=num_kv_heads, cartridge_len=cartridge_len, splits=splits, reqs=reqs,
        block_n=block_n, num_warps=num_warps, num_stages=num_stages, beside_cascade=bool(cascade),
    )  # fmt: skip
    return replace(cfg, cart_rows=cascade, cart_splits=cart_splits or 1, cart_pdl=cart_pdl) if cascade else cfg


def _decode_walk_config(
    group: int,
    batch: int,
    max_live: int,
    *,
    num_kv_heads: int | None,
    cartridge_len: int | None,
    splits: int | None,
    reqs: int | None,
    block_n: int | None,
    num_warps: int | None,
    num_stages: int | None,
    beside_cascade: bool = False,
) -> KernelConfig:
    """The fused decode kernel's own walk: over the cartridge and the live pages, or (``cartridge_len`` 0,
    ``beside_cascade``) over the live pages alone."""
    explicit_reqs = reqs is not None
    if reqs is None:
        reqs = 2 if batch >= DECODE_PACK_MIN_BATCH else 1
    # Packed requests must fill at most one 16-row tile together, in a power-of-two count.
    reqs = _pow2_at_most(max(1, min(reqs, 16 // group if group <= 16 else 1)))
    if splits is None:
        splits = 1
        if num_kv_heads is not None and cartridge_len is not None and reqs == 1:
            # Beside a cascade, whose programs run at the same time, the walk splits only a grid that would leave
            # half the SMs idle (H100 sweep: batch 16, 128 live, 128 programs: 12.7 us whole, 16.7 split in two).
            sms = GPU_SMS // 2 if beside_cascade else GPU_SMS
            splits = decode_splits(batch, num_kv_heads, cartridge_len + max_live, sms)
    if splits > 1 and not explicit_reqs:
        reqs = 1  # a split packs requests only when asked to
    block_m = max(16, _pow2_at_least(reqs * group))
    if splits > 1:
        # Each program owns a few tiles of one request (or of the packed ones, only when asked): plain 128-key
        # tiles, shallow pipelining. A range that fits one 64-key tile would leave half of a 128-key tile masked
        # (2026-12-03 sweep, batch 1, 760 keys in 16 ranges: 8.6 us with 64-key tiles against 10.2 with 128).
        if block_n is None:
            narrow = cartridge_len is not None and cartridge_len + max_live <= DECODE_SPLIT_NARROW_KEYS * splits
            block_n = 64 if narrow else 128
        return KernelConfig(
            block_m=block_m,
            block_n=max(block_n, 16 * reqs),
            reqs_per_program=reqs,
            num_warps=num_warps if num_warps is not None else 4,
            num_stages=num_stages if num_stages is not None else 2,
            splits=splits,
        )
    # A tiny grid with long suffixes: wider tiles put more bytes in flight per program.
    wide = reqs == 1 and batch <= DECODE_WIDE_MAX_BATCH and max_live >= DECODE_WIDE_MIN_LIVE
    if block_n is None:
        block_n = 256 if (reqs > 2 or wide) else 128
    block_n = max(block_n, 16 * reqs)
    return KernelConfig(
        block_m=block_m,
        block_n=block_n,
        reqs_per_program=reqs,
        num_warps=num_warps if num_warps is not None else (8 if wide else 4),
        num_stages=num_stages if num_stages is not None else (2 if wide else 3),
    )


def prefill_grid_sms(impl: str = "triton") -> int:
    """Programs of 128-row tiles (x KV heads) below which ``impl``'s default prefill takes 64-row tiles."""
    return GLUON_PREFILL_GRID_SMS if impl == "gluon" else PREFILL_GRID_SMS


def _small_grid(rows: int | None, num_kv_heads: int | None, impl: str) -> bool:
    """Whether 128-row tiles of this many query rows would leave ``impl``'s programs short of its SM count."""
    return rows is not None and num_kv_heads is not None and (rows // 128) * num_kv_heads < prefill_grid_sms(impl)


def _gluon_two_per_sm(head_dim: int, rows: int | None, num_kv_heads: int | None) -> bool:
    """Whether the Gluon prefill's default for this many query rows is the 64 x 64 tile that two programs per SM
    share (between the small-grid cut and GLUON_TWO_PER_SM_MAX_ROWS, at GLUON_TWO_PER_SM_HEAD_DIM)."""
    if rows is None or num_kv_heads is None or head_dim != GLUON_TWO_PER_SM_HEAD_DIM:
        return False
    return not _small_grid(rows, num_kv_heads, "gluon") and rows <= GLUON_TWO_PER_SM_MAX_ROWS


def _gluon_persistent(head_dim: int, rows: int | None, block_m: int) -> bool:
    """Whether the Gluon prefill's default runs ``block_m``-row tiles of this many query rows on a persistent grid
    (128-row tiles past GLUON_TWO_PER_SM_MAX_ROWS, at GLUON_TWO_PER_SM_HEAD_DIM)."""
    measured = head_dim == GLUON_TWO_PER_SM_HEAD_DIM and block_m == 128
    return measured and rows is not None and rows > GLUON_TWO_PER_SM_MAX_ROWS


def prefill_config(
    group: int,
    head_dim: int,
    *,
    rows: int | None = None,
    num_kv_heads: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    warp_specialize: bool = False,
    cartridge_tma: bool = False,
    impl: str = "triton",
    live_v_bits: int = 16,
    persistent: bool | None = None,
) -> KernelConfig:
    """Prefill configuration; the defaults follow the H200 sweep recorded in results/2026-11-29-kernel-h200/.

    ``rows`` (total query rows, i.e. query tokens x group) and ``num_kv_heads`` let the default drop to
    64-row tiles when 128-row tiles would leave SMs idle (for the Gluon kernel, half of them). ``impl="gluon"``
    gives the Gluon kernel's configuration: 128 x 128 tiles over a 2-stage ring at head_dim 128
    (3 stages at 64), one consumer warpgroup per 64 rows; 64 x 64 tiles, two programs per SM, from the small-grid
    cut up to GLUON_TWO_PER_SM_MAX_ROWS at head_dim 128; 64-key tiles where the live V bit width would need
    more shared memory than SM90 has (the Gluon kernel's cartridge V is 16-bit whatever the served dtype);
    ``persistent`` (None: the default) for 128-row tiles past GLUON_TWO_PER_SM_MAX_ROWS at head_dim 128, whose
    default ring takes a third stage where 16-bit live values leave room for it.
    """
    small_grid = _small_grid(rows, num_kv_heads, impl)
    two_per_sm = impl == "gluon" and _gluon_two_per_sm(head_dim, rows, num_kv_heads)
    if block_m is None:
        block_m = 64 if small_grid or two_per_sm else 128
    if impl == "gluon":
        # Only the whole 64 x 64 x 2-stage tile fits two programs per SM: a caller's 128 rows or deeper ring keeps
        # 128 keys.
        narrow = two_per_sm and block_m == 64 and num_stages in (None, 2)
        cfg = KernelConfig(
            block_m=block_m,
            block_n=block_n if block_n is not None else (64 if narrow else 128),
            reqs_per_program=1,
            num_warps=num_warps if num_warps is not None else 4,
            num_stages=num_stages if num_stages is not None else (2 if head_dim == 128 else 3),
            impl="gluon",
            persistent=_gluon_persistent(head_dim, rows, block_m) if persistent is None else persistent,
        )
        # A persistent grid's 128 x 128 tiles take a third stage where it fits (16-bit live values): the producer
        # then runs a whole tile further ahead of the two consumers.
        deeper = replace(cfg, num_stages=3)
        fits = gluon_shared_bytes(deeper, head_dim, live_v_bits) <= SM90_SHARED_BYTES
        if cfg.persistent and (cfg.block_m, cfg.block_n) == (128, 128) and num_stages is None and fits:
            cfg = deeper
        too_big = gluon_shared_bytes(cfg, head_dim, live_v_bits) > SM90_SHARED_BYTES
        return replace(cfg, block_n=64) if too_big and block_n is None else cfg
    if persistent:
        raise ValueError(f"a persistent grid is a Gluon prefill option, not the {impl} prefill's")
    bm = max(block_m, 16, _pow2_at_least(group))
    if block_n is None:
        # Measured on the H200 (head_dim 128): 128x32 tiles, one warpgroup, 4 stages beat larger tiles;
        # head_dim 64 has not been swept and keeps 64-wide tiles.
        block_n = 64 if (bm < 128 or head_dim != 128) else 32
    deep = bm >= 128 and block_n <= 32
    return KernelConfig(
        block_m=bm,
        block_n=block_n,
        reqs_per_program=1,
        num_warps=num_warps if num_warps is not None else 4,
        num_stages=num_stages if num_stages is not None else (4 if deep else 3),
        warp_specialize=warp_specialize,
        cartridge_tma=cartridge_tma,
    )


def gluon_shared_bytes(cfg: KernelConfig, head_dim: int, live_v_bits: int) -> int:
    """Shared memory the Gluon prefill allocates for ``cfg``: Q, the K ring, one 16-bit V ring (cartridge tiles,
    16-bit live tiles and the FP16 staging of FP8 live tiles take turns in it) and an FP8 live V ring when live V
    is FP8, plus GLUON_SHARED_SLACK."""
    ring = cfg.num_stages * cfg.block_n * head_dim
    fp8_live = ring if live_v_bits == 8 else 0
    q = cfg.block_m * head_dim * 2
    return q + ring * 2 + ring * 2 + fp8_live + GLUON_SHARED_SLACK
