"""Build the Gluon prefill for SM90 without a GPU and tabulate what each variant compiled to.

Run in a venv with the GPU image's Triton (`nox -s gluon` makes one: .nox/gluon/bin/python scripts/gluon_build.py).
Per variant: shared memory, launch registers and the setmaxnreg moves of its partitions, local and stack (spill)
bytes, the wgmma shapes and counts, TMA copies, FP8 conversions and barriers in the PTX, and the cubin's sha256; a
Markdown table last, JSON beside it with --out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "kernels"))

from cartridge_attn import heuristics as H  # noqa: E402
from cartridge_attn.gluon_host import compile_offline, gluon_problem  # noqa: E402

BITS = {"bfloat16": 16, "float16": 16, "float8_e4m3fn": 8}
# (name, group, head_dim, page, block_m, q, cartridge V, live V[, block_n[, persistent grid]]): the Qwen3-8B shapes
# of the perf points first.
VARIANTS = [
    ("qwen3-8b p8 k16v8", 4, 128, 8, 128, "bfloat16", "float8_e4m3fn", "bfloat16"),
    ("qwen3-8b p16 k16v8", 4, 128, 16, 128, "bfloat16", "float8_e4m3fn", "bfloat16"),
    ("qwen3-8b p8 k16v8, 64 rows", 4, 128, 8, 64, "bfloat16", "float8_e4m3fn", "bfloat16"),
    ("qwen3-8b p8 k16v8, two per SM", 4, 128, 8, 64, "bfloat16", "float8_e4m3fn", "bfloat16", 64),
    ("qwen3-8b p8 k16v8, fp8 live", 4, 128, 8, 128, "bfloat16", "float8_e4m3fn", "float8_e4m3fn"),
    ("qwen3-8b p8 k16v16", 4, 128, 8, 128, "bfloat16", "bfloat16", "bfloat16"),
    ("head_dim 64 p8 k16v8", 4, 64, 8, 128, "bfloat16", "float8_e4m3fn", "bfloat16"),
    ("group 3 p8 k16v8", 3, 128, 8, 128, "bfloat16", "float8_e4m3fn", "bfloat16"),
    ("qwen3-8b p8 k16v8, persistent", 4, 128, 8, 128, "bfloat16", "float8_e4m3fn", "bfloat16", None, True),
    ("qwen3-8b p8 k16v8, 128 x 64 persistent", 4, 128, 8, 128, "bfloat16", "float8_e4m3fn", "bfloat16", 64, True),
]


def _resources(cubin: bytes) -> dict[str, int]:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True, check=True)
    return {k: int(v) for k, v in re.findall(r"(REG|LOCAL|SHARED|STACK):(\d+)", out.stdout)}


def describe(
    name: str,
    group: int,
    d: int,
    page: int,
    bm: int,
    q: str,
    cv: str,
    lv: str,
    bn: int | None = None,
    persistent: bool = False,
) -> dict:
    cfg = H.prefill_config(group, d, block_m=bm, block_n=bn, impl="gluon", live_v_bits=BITS[lv], persistent=persistent)
    built = compile_offline(cfg, group=group, head_dim=d, page_size=page, q_dtype=q, cartridge_v_dtype=cv,
                            live_v_dtype=lv)  # fmt: skip
    ptx = built.asm["ptx"]
    res = _resources(built.asm["cubin"])
    wgmma = Counter(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+\.\w+\.\w+\.\w+)", ptx))
    return {
        "variant": name,
        "config": cfg.tag,
        "shared_bytes": built.metadata.shared,
        "shared_estimate": H.gluon_shared_bytes(cfg, d, BITS[lv]),
        "launch_registers": res.get("REG"),
        "local_bytes": res.get("LOCAL"),
        # ptxas puts some spills on the stack frame alone (LOCAL 0): tests/gluon counts both.
        "stack_bytes": res.get("STACK"),
        "setmaxnreg": sorted(set(re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+);", ptx))),
        "wgmma": dict(sorted(wgmma.items())),
        "tma_copies": len(re.findall(r"cp\.async\.bulk\.tensor", ptx)),
        "fp8_conversions": len(re.findall(r"cvt\.rn\.f16x2\.e4m3x2", ptx)),
        "mbarrier_waits": len(re.findall(r"mbarrier\.try_wait", ptx)),
        "cubin_sha256": hashlib.sha256(built.asm["cubin"]).hexdigest(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = ap.parse_args()
    if (problem := gluon_problem()) is not None:
        print(problem, file=sys.stderr)
        return 2
    import triton

    rows = [describe(*v) for v in VARIANTS]
    if args.out:
        args.out.write_text(json.dumps({"triton": triton.__version__, "rows": rows}, indent=1) + "\n")
    print(f"Triton {triton.__version__}, target cuda:90 (sm_90a), no GPU\n")
    print("| variant | config | shared B (estimate) | launch regs | setmaxnreg | local / stack B "
          "| wgmma (static count) | TMA copies | FP8 cvt |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        moves = ", ".join(f"{op} {n}" for op, n in r["setmaxnreg"])
        mma = "; ".join(f"{k} x{v}" for k, v in r["wgmma"].items())
        print(f"| {r['variant']} | {r['config']} | {r['shared_bytes']} ({r['shared_estimate']}) "
              f"| {r['launch_registers']} | {moves} | {r['local_bytes']} / {r['stack_bytes']} | {mma} "
              f"| {r['tma_copies']} | {r['fp8_conversions']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
