"""Offline SM90 builds (no GPU) behind this record, for whichever tree PYTHONPATH puts first:

* every configuration tests/gluon builds: its shared memory against the buffers `gluon_shared_bytes` counts (what
  the compiler adds on top: barriers and layout-conversion scratch, which GLUON_SHARED_SLACK must bound);
* the dispatch's persistent tile past 16,384 rows (group 4, head_dim 128, 8 KV heads) for 16-bit and FP8 live
  values: its tag, shared memory, and the kernel's PTX count of `bar.sync` and `mbarrier.arrive`.

    PYTHONPATH=<tree>/kernels:<tree> python3 offline_builds.py      (from <tree>, in a venv with triton==3.6.0)
"""

import importlib.util
from pathlib import Path

from cartridge_attn import heuristics as H
from cartridge_attn.gluon_host import compile_offline

spec = importlib.util.spec_from_file_location("build_tests", Path("tests/gluon/test_gluon_build.py"))
tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tests)

worst = 0
for v in tests.VARIANTS:
    cfg, built = tests._build(v)
    lv = tests.BITS[v[5][2]]
    buffers = H.gluon_shared_bytes(cfg, v[1], lv) - H.GLUON_SHARED_SLACK
    extra = built.metadata.shared - buffers
    worst = max(worst, extra)
    print(f"{tests._ids(v)} {cfg.tag}: shared {built.metadata.shared}, buffers {buffers}, extra {extra}")
print(f"most extra: {worst} bytes; GLUON_SHARED_SLACK {H.GLUON_SHARED_SLACK}; SM90_SHARED_BYTES {H.SM90_SHARED_BYTES}")

for lv, bits in (("bfloat16", 16), ("float8_e4m3fn", 8)):
    cfg = H.prefill_config(4, 128, rows=16385, num_kv_heads=8, impl="gluon", live_v_bits=bits)
    built = compile_offline(cfg, group=4, head_dim=128, page_size=8, live_v_dtype=lv)
    ptx = built.asm["ptx"]
    print(
        f"persistent default, live V {lv}: {cfg.tag}, shared {built.metadata.shared}, "
        f"bar.sync {ptx.count('bar.sync')}, mbarrier.arrive {ptx.count('mbarrier.arrive')}"
    )
