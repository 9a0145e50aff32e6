"""Offline SM90 builds (no GPU, Triton 3.6) of the Gluon prefill's 64 x 64 tile that two programs share an SM with,
over 2 and 3 stages, 16-bit and FP8 live values (group 4, head_dim 128, 8-token pages): the shared memory each
build takes, the dispatch's estimate of it (`gluon_shared_bytes`, with GLUON_SHARED_SLACK), the launch registers
per thread (Triton's cuobjdump on the cubin), and how many programs an SM holds by each: its 233,472 bytes of
shared memory with a reserved KiB per program, and its 65,536 registers.

    PYTHONPATH=kernels:. python3 results/2026-12-07-gluon-two-per-sm-s3-build/shared_bytes.py   (from the root)
"""

import dataclasses
import re
import subprocess
import tempfile
from pathlib import Path

import triton
from cartridge_attn import heuristics as H
from cartridge_attn.gluon_host import compile_offline

CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def launch_registers(cubin: bytes) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([str(CUOBJDUMP), "--dump-resource-usage", str(path)], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    return int(re.search(r"REG:(\d+)", out).group(1))


print("| live V | tile | shared (build) | estimate | registers x threads | programs per SM: shared, registers |")
print("| --- | --- | --- | --- | --- | --- |")
base = H.prefill_config(4, 128, rows=8192, num_kv_heads=8, impl="gluon")
for live, bits in (("bfloat16", 16), ("float8_e4m3fn", 8)):
    for stages in (2, 3):
        cfg = dataclasses.replace(base, num_stages=stages)
        built = compile_offline(cfg, group=4, head_dim=128, page_size=8, live_v_dtype=live)
        shared, threads = built.metadata.shared, built.metadata.num_warps * 32
        regs = launch_registers(built.asm["cubin"])
        by_shared = H.SM90_SHARED_BYTES_PER_SM // (shared + H.SM90_SHARED_BYTES_RESERVED)
        by_registers = 65536 // (regs * threads)
        estimate = H.gluon_shared_bytes(cfg, 128, bits)
        print(f"| {live} | {cfg.tag} | {shared:,} | {estimate:,} | {regs} x {threads} | {by_shared}, {by_registers} |")
