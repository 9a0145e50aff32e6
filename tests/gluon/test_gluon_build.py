"""The Gluon prefill built for SM90 on a CPU host (Triton's own ptxas, no GPU): every configuration the wrapper can
launch compiles, with the instructions and resources its design rests on, and every mutant of its catalog still
compiles (so that on a GPU each is caught or survives, never merely broken).

The kernel is written in Triton 3.6's Gluon (the GPU image's Triton); `nox -s gluon` runs this file in a venv with
that release. The suite's own venv has a newer Triton and skips here with the reason.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cartridge_attn import heuristics as H
from cartridge_attn.gluon_host import compile_offline, gluon_problem

from qualify.mutation.catalog import load_catalog
from qualify.mutation.materialize import materialize

ROOT = Path(__file__).resolve().parents[2]
GLUON_CATALOG = ROOT / "mutation" / "cartridge_attn_gluon.yaml"

if (_problem := gluon_problem()) is not None:
    pytest.skip(_problem, allow_module_level=True)

import triton  # noqa: E402  (after the skip: only a Triton 3.6 venv gets here)

BITS = {"bfloat16": 16, "float16": 16, "float8_e4m3fn": 8}
PTX_TYPE = {"bfloat16": "bf16", "float16": "f16"}
K16V8 = ("bfloat16", "float8_e4m3fn", "bfloat16")  # (q, cartridge V, live V)
K16V8_LIVE8 = ("bfloat16", "float8_e4m3fn", "float8_e4m3fn")
K16V16 = ("bfloat16", "bfloat16", "bfloat16")
K16V16_LIVE8 = ("bfloat16", "bfloat16", "float8_e4m3fn")  # FP8 staging in the BF16 cartridge ring, reinterpreted
FP16 = ("float16", "float16", "float8_e4m3fn")

# (tile, head_dim, group, page, causal, dtypes), the tile a block_m, (block_m, block_n) or (block_m, block_n,
# persistent grid): both consumer counts, the dispatch's 64 x 64 tile, both head dims and page sizes, GQA groups that
# are not powers of two, every V dtype pairing the dispatch serves, fp16 queries and the persistent grid's tiles.
VARIANTS = [
    (128, 128, 4, 8, True, K16V8), (128, 128, 4, 16, True, K16V8_LIVE8), (128, 128, 4, 8, False, K16V16),
    (64, 128, 4, 8, True, K16V8), (64, 128, 4, 16, True, K16V8_LIVE8), (128, 64, 4, 8, True, K16V8),
    ((64, 64), 128, 4, 8, True, K16V8), ((64, 64), 128, 3, 16, True, K16V8_LIVE8),
    (64, 64, 5, 16, True, K16V8_LIVE8), (128, 128, 3, 8, True, K16V8), (128, 128, 16, 16, False, FP16),
    (128, 64, 1, 8, True, K16V16), (128, 128, 4, 16, True, K16V16_LIVE8),
    ((128, 128, True), 128, 4, 8, True, K16V8), ((128, 128, True), 128, 4, 16, True, K16V8_LIVE8),
    ((128, 64, True), 128, 3, 8, True, K16V8), ((64, 64, True), 128, 4, 8, False, K16V16),
]  # fmt: skip


def _tile(tile: int | tuple) -> tuple[int, int | None, bool]:
    bm, bn, persistent = (tile, None, False) if isinstance(tile, int) else (*tile, False)[:3]
    return bm, bn, persistent


def _ids(v: tuple) -> str:
    tile, d, g, page, causal, (q, cv, lv) = v
    bm, bn, persistent = _tile(tile)
    name = {"bfloat16": "bf16", "float16": "fp16"}[q]
    keys = f"n{bn}-" if bn else ""
    grid = "persistent-" if persistent else ""
    return f"m{bm}-{keys}{grid}d{d}-g{g}-p{page}-{'causal' if causal else 'full'}-{name}-cv{BITS[cv]}-lv{BITS[lv]}"


def _resources(cubin: bytes, tmp: Path) -> dict[str, int]:
    """The cubin's resource usage (Triton's cuobjdump): launch registers per thread (REG), and the local memory
    (LOCAL: declared local arrays; STACK: the frame that register spills live in)."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    path = tmp / "k.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([str(tool), "--dump-resource-usage", str(path)], capture_output=True, text=True, check=True)
    found = {k: int(v) for k, v in re.findall(r"(REG|LOCAL|STACK):(\d+)", out.stdout)}
    assert set(found) == {"REG", "LOCAL", "STACK"}, out.stdout
    return found


def _build(v: tuple, kernel: Any = None) -> tuple[H.KernelConfig, Any]:
    tile, d, g, page, causal, (q, cv, lv) = v
    bm, bn, persistent = _tile(tile)
    cfg = H.prefill_config(g, d, block_m=bm, block_n=bn, impl="gluon", live_v_bits=BITS[lv], persistent=persistent)
    built = compile_offline(cfg, group=g, head_dim=d, page_size=page, causal=causal, q_dtype=q,
                            cartridge_v_dtype=cv, live_v_dtype=lv, kernel=kernel)  # fmt: skip
    return cfg, built


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_builds_with_tma_wgmma_and_specialized_warps(variant: tuple, tmp_path: Path) -> None:
    _, d, _, _, _, (q, cv, lv) = variant
    cfg, built = _build(variant)
    bm = cfg.block_m
    ptx = built.asm["ptx"]
    assert built.metadata.target.arch == 90
    # The shared-memory estimate the plan refuses by is an upper bound, and a tight one.
    need = H.gluon_shared_bytes(cfg, d, BITS[lv])
    assert built.metadata.shared <= need <= built.metadata.shared + H.GLUON_SHARED_SLACK
    assert need <= H.SM90_SHARED_BYTES
    # QK^T: one wgmma of N = block_n per warpgroup (the Triton kernel's registers allowed N = 32 only).
    assert f"wgmma.mma_async.sync.aligned.m64n{cfg.block_n}k16.f32.{PTX_TYPE[q]}.{PTX_TYPE[q]}" in ptx
    # PV: an FP8 cartridge arrives as its FP16 expansion and FP8 live values are staged as FP16 (P in FP16 with
    # both); 16-bit values feed the wgmma as loaded. Only FP8 live values are converted in the kernel.
    pv_types = {"f16" if BITS[v] == 8 else PTX_TYPE[q] for v in (cv, lv)}
    for t in pv_types:
        assert f"wgmma.mma_async.sync.aligned.m64n{d}k16.f32.{t}.{t}" in ptx, t
    assert ("cvt.rn.f16x2.e4m3x2" in ptx) == (BITS[lv] == 8)
    # Every K / V byte arrives by TMA, completing on mbarriers; the producer gives up its registers.
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "mbarrier.try_wait.parity" in ptx
    # Register moves: two consumers at 224 each and the producer and stager's warpgroup at 56; one consumer (the
    # launch's default partition) at 216 and that warpgroup at 40.
    aux, consumer = (56, 224) if bm == 128 else (40, 216)
    for n in (aux, consumer):
        assert re.search(rf"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+{n};", ptx), n
    res = _resources(built.asm["cubin"], tmp_path)
    # Nothing spills where it costs: no local memory in the loops over a work item's tiles. On a persistent grid
    # ptxas may park a word or two of loop bounds there across the partitions' register moves (at 128 x 128: the
    # item count and the cartridge's tile count), reloaded once per partition or per work item; one program per
    # item spills nothing.
    sass = _sass(built.asm["cubin"], tmp_path)
    assert res["LOCAL"] == 0 and res["STACK"] <= (8 if cfg.persistent else 0), res
    assert not _local_memory_in_tile_loops(sass), _local_memory_in_tile_loops(sass)
    if (cfg.block_m, cfg.block_n) == (64, 64):
        # The dispatch's two-per-SM tile: two programs' shared memory and launch registers fit one SM.
        assert 2 * (built.metadata.shared + H.SM90_SHARED_BYTES_RESERVED) <= H.SM90_SHARED_BYTES_PER_SM
        assert 2 * res["REG"] * built.metadata.num_warps * 32 <= 65536
    # Software pipelining: after issuing a tile's QK^T and the previous tile's PV, a warpgroup waits for one
    # group only (the scores), leaving the PV in flight.
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)
    # The output leaves through the Q buffer as 16-byte vectors, not as the wgmma layout's 4-byte pairs.
    stores = re.findall(r"st\.global\.[\w.]+", ptx)
    assert stores and all(st.startswith("st.global.v4.") for st in stores), sorted(set(stores))


def _sass(cubin: bytes, tmp: Path) -> str:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    path = tmp / "k.cubin"
    path.write_bytes(cubin)
    return subprocess.run([str(tool), "-c", str(path)], capture_output=True, text=True, check=True).stdout


def _local_memory_in_tile_loops(sass: str) -> list[str]:
    """Local-memory instructions inside a loop over tiles: a loop (a branch back to a label above it) that issues
    wgmma or TMA loads and holds no other such loop, i.e. a walk, the producer's loads or the stager's relay. SASS
    in which no such loop is found gives one line that says so: a check that finds nothing to check must not pass."""
    lines = sass.splitlines()
    labels: dict[str, int] = {}
    loops: list[tuple[int, int]] = []
    for i, line in enumerate(lines):
        if m := re.match(r"\s*(\.L_x_\d+):", line):
            labels[m.group(1)] = i
        elif (m := re.search(r"BRA `\((\.L_x_\d+)\)", line)) and m.group(1) in labels:
            loops.append((labels[m.group(1)], i))
    busy = [(a, b) for a, b in loops if any(re.search(r"HGMMA|UTMALDG|SYNCS.ARRIVE", ln) for ln in lines[a:b])]
    tile_loops = [(a, b) for a, b in busy if not any(a < c and d <= b and (c, d) != (a, b) for c, d in busy)]
    if not tile_loops:
        return ["no loop over tiles found: nvdisasm's labels or branches are not in the form this check reads"]
    return [lines[i].strip() for a, b in tile_loops for i in range(a, b) if re.search(r"\b(LDL|STL)\b", lines[i])]


def test_the_loop_check_reports_local_memory_in_a_loop_over_tiles_only() -> None:
    # A walk over work items (.L_x_0) around a walk over tiles (.L_x_1): a spill in the tile loop is reported, one
    # in the item loop or the prologue is not, and SASS without a tile loop is reported as such.
    sass = """\
        /*0000*/                   LDL R2, [R1] ;
.L_x_0:
        /*0010*/                   STL [R1+0x8], R4 ;
.L_x_1:
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*0030*/                   LDL R3, [R1+0x4] ;
        /*0040*/              @P0 BRA `(.L_x_1) ;
        /*0050*/              @P1 BRA `(.L_x_0) ;
"""
    assert _local_memory_in_tile_loops(sass) == ["/*0030*/                   LDL R3, [R1+0x4] ;"]
    assert _local_memory_in_tile_loops(sass.replace("LDL R3", "MOV R3")) == []
    assert _local_memory_in_tile_loops(sass.replace("HGMMA", "FFMA"))[0].startswith("no loop over tiles found")


def _exp2_between_the_waits(cubin: bytes, tmp: Path) -> list[int]:
    """For each pipelined step in the SASS: the MUFU.EX2 (softmax) instructions between the wait that leaves the
    PV in flight (DEPBAR.LE 1) and the wait for the PV (DEPBAR.LE 0)."""
    sass = _sass(cubin, tmp)
    counts: list[int] = []
    inside: int | None = None
    for line in sass.splitlines():
        if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in line:
            inside = 0
        elif "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line and inside is not None:
            counts.append(inside)
            inside = None
        elif inside is not None and "MUFU.EX2" in line:
            inside += 1
    return counts


@pytest.mark.parametrize("variant", VARIANTS, ids=_ids)
def test_the_softmax_runs_while_the_pv_wgmma_does(variant: tuple, tmp_path: Path) -> None:
    # ptxas hoists the PV wait to the top of the softmax's basic block unless a block boundary (the staged V's
    # mbarrier wait loop) lies between them (results/2026-12-05-gluon-pipelined-build: no overlap before).
    _, built = _build(variant)
    counts = _exp2_between_the_waits(built.asm["cubin"], tmp_path)
    assert counts, "no pipelined step in the SASS"
    assert all(n > 0 for n in counts), counts


def test_a_ring_over_shared_memory_is_refused_by_the_estimate() -> None:
    # FP8 live values keep a ring of their own beside the 16-bit one: 128 x 128 tiles over 3 stages exceed SM90,
    # so that configuration's default drops to 64-key tiles; the refused one really is over the limit once compiled.
    big = H.prefill_config(4, 128, block_n=128, num_stages=3, impl="gluon", live_v_bits=8)
    assert H.gluon_shared_bytes(big, 128, 8) > H.SM90_SHARED_BYTES
    assert H.prefill_config(4, 128, impl="gluon", num_stages=3, live_v_bits=8).block_n == 64
    built = compile_offline(big, group=4, head_dim=128, page_size=8, live_v_dtype="float8_e4m3fn")
    assert built.metadata.shared > H.SM90_SHARED_BYTES


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_mutant_of_the_gluon_catalog_still_builds(tmp_path: Path) -> None:
    loaded = load_catalog(GLUON_CATALOG)
    target = loaded.root / loaded.catalog.target
    for i, m in enumerate(loaded.catalog.mutants):
        copy = materialize(target, tmp_path / m.id, m)
        kernel = _load(copy.package / m.file, f"_gluon_mutant_{i}").cartridge_prefill_ws_kernel
        # BF16 and FP8 live values, one program per item and a persistent grid: every edited line is traced.
        for variant in (VARIANTS[0], VARIANTS[1], next(v for v in VARIANTS if _tile(v[0])[2])):
            _build(variant, kernel)
