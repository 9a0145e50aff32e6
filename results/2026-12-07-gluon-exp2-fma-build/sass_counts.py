"""SASS counts of the Gluon prefill at the two prefill points the patches aim at, as the dispatch configures them.

Run in a venv with the GPU image's Triton (3.6.0), no GPU: `python sass_counts.py <tree> [<tree> ...]`, where a tree
is a checkout (patched or not). Per tree and point: the tile tag, registers, stack and local bytes, whole-kernel
opcode counts, and the same counts in each loop that holds both wgmmas and MUFU ops (a consumer's tile loop: one
128- or 64-key tile per trip, per consumer warp).
"""

import hashlib
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

OPS = ("MUFU", "FFMA", "FADD", "FMUL", "FMNMX", "IMAD", "HGMMA")
# (point, batch, suffix): Qwen3-8B attention, group 4, 8 KV heads, head_dim 128, page 8, BF16 queries, FP8 cartridge
# V, 16-bit live V, as in the perf gate.
POINTS = (("(16, 128)", 16, 128), ("(64, 512)", 64, 512))
INSTR = re.compile(r"^\s+/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);", re.M)


def tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def instructions(sass: str) -> list[tuple[int, str, str]]:
    return [(int(a, 16), op.split(".")[0], rest) for a, op, rest in INSTR.findall(sass)]


def loops(ins: list[tuple[int, str, str]], labels: dict[str, int]) -> list[Counter]:
    """Opcode counts of every innermost loop (a backward branch's span holding no other) with HGMMA and MUFU."""
    spans = []
    for addr, op, rest in ins:
        label = re.search(r"(\.L_x_\d+)", rest)
        if op == "BRA" and label and labels.get(label.group(1), addr) < addr:
            spans.append((labels[label.group(1)], addr))
    innermost = [(a, b) for a, b in spans if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]
    out = []
    for start, end in innermost:
        body = Counter(o for a, o, _ in ins if start <= a <= end)
        if body["HGMMA"] and body["MUFU"]:
            body["all"] = sum(body.values())
            out.append(body)
    return out


def main() -> None:
    sys.path.insert(0, str(Path(sys.argv[1]).resolve() / "kernels"))
    for tree in sys.argv[1:]:
        for mod in [m for m in sys.modules if m.startswith("cartridge_attn")]:
            del sys.modules[mod]
        sys.path[0] = str(Path(tree).resolve() / "kernels")
        from cartridge_attn import heuristics as H
        from cartridge_attn.gluon_host import compile_offline

        for point, batch, suffix in POINTS:
            cfg = H.prefill_config(4, 128, rows=batch * suffix * 4, num_kv_heads=8, impl="gluon", live_v_bits=16)
            built = compile_offline(cfg, group=4, head_dim=128, page_size=8, q_dtype="bfloat16",
                                    cartridge_v_dtype="float8_e4m3fn", live_v_dtype="bfloat16")  # fmt: skip
            with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                f.write(built.asm["cubin"])
                f.flush()
                sass = subprocess.run([tool("nvdisasm"), "-c", f.name], capture_output=True, text=True).stdout
                res = subprocess.run([tool("cuobjdump"), "--dump-resource-usage", f.name], capture_output=True,
                                     text=True).stdout  # fmt: skip
            labels = {m.group(1): int(m.group(2), 16)
                      for m in re.finditer(r"^(\.L_x_\d+):\s*\n\s+/\*([0-9a-f]+)\*/", sass, re.M)}  # fmt: skip
            ins = instructions(sass)
            whole = Counter(op for _, op, _ in ins)
            r = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", res))
            print(f"{tree} {point} {cfg.tag} cubin {hashlib.sha256(built.asm['cubin']).hexdigest()[:16]} "
                  f"REG {r['REG']} STACK {r['STACK']} LOCAL {r['LOCAL']}")  # fmt: skip
            print("  whole kernel: " + " ".join(f"{k} {whole[k]}" for k in OPS) + f" all {len(ins)}")
            for body in loops(ins, labels):
                print("  loop: " + " ".join(f"{k} {body[k]}" for k in (*OPS, "all")))


if __name__ == "__main__":
    main()
