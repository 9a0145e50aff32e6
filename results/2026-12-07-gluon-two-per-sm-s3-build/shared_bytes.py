"""Offline SM90 builds (no GPU, Triton 3.6) of the Gluon prefill's 64 x 64 tile that two programs share an SM with,
over 2 and 3 stages, 16-bit and FP8 live values (group 4, head_dim 128, 8-token pages): the shared memory each
build takes, the dispatch's estimate of it (`gluon_shared_bytes`, with GLUON_SHARED_SLACK), and how many programs
an SM's 233,472 bytes hold at that size with a reserved KiB each.

    PYTHONPATH=kernels:. python3 results/2026-12-07-gluon-two-per-sm-s3-build/shared_bytes.py   (from the root)
"""

import dataclasses

from cartridge_attn import heuristics as H
from cartridge_attn.gluon_host import compile_offline

print("| live V | tile | shared (build) | estimate | programs per SM by the build |")
print("| --- | --- | --- | --- | --- |")
base = H.prefill_config(4, 128, rows=8192, num_kv_heads=8, impl="gluon")
for live, bits in (("bfloat16", 16), ("float8_e4m3fn", 8)):
    for stages in (2, 3):
        cfg = dataclasses.replace(base, num_stages=stages)
        shared = compile_offline(cfg, group=4, head_dim=128, page_size=8, live_v_dtype=live).metadata.shared
        per_sm = H.SM90_SHARED_BYTES_PER_SM // (shared + H.SM90_SHARED_BYTES_RESERVED)
        print(f"| {live} | {cfg.tag} | {shared:,} | {H.gluon_shared_bytes(cfg, 128, bits):,} | {per_sm} |")
