"""SASS counts of the Gluon prefill at the two prefill points the patches aim at, as the dispatch configures them.

Run in a venv with the GPU image's Triton (3.6.0), no GPU: `python sass_counts.py <tree> [<tree> ...]`, where a tree
is a checkout (patched or not). Per tree and point: the tile tag, registers, stack and local bytes, whole-kernel
opcode counts, and the same counts in each loop that holds both wgmmas and MUFU ops (a consumer's tile loop: one
128- or 64-key tile per trip, per consumer warp), over every path and over the unmasked trip (see `loops`).
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


def loops(ins: list[tuple[int, str, str]], labels: dict[str, int]) -> list[tuple[Counter, Counter, Counter]]:
    """Per innermost loop (a backward branch's span holding no other) with HGMMA and MUFU: the opcode counts of its
    whole span (every path), of the path on which each forward branch inside it is taken (the tile walk's masked
    block is such a branch's skipped span: that is the unmasked trip), and of what that path leaves out.

    This reads the layout ptxas gives these kernels: a tile loop is one span ending in its back-edge; out-of-line
    retry blocks (mbarrier waits) branch back from past the kernel's end and hold a loop of their own, so none of
    them counts as innermost."""

    def target(rest: str) -> int | None:
        label = re.search(r"(\.L_x_\d+)", rest)
        return labels.get(label.group(1)) if label else None

    spans = [(target(rest), addr) for addr, op, rest in ins if op == "BRA" and (target(rest) or addr) < addr]
    innermost = [(a, b) for a, b in spans if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]
    out = []
    for start, end in innermost:
        body = [(a, o, r) for a, o, r in ins if start <= a <= end]
        every = Counter(o for _, o, _ in body)
        if not (every["HGMMA"] and every["MUFU"]):
            continue
        skipped = [(a, t) for a, o, r in body if o == "BRA" and (t := target(r)) is not None and a < t <= end]
        left_out = Counter(o for a, o, _ in body if any(b < a < t for b, t in skipped))
        taken = every - left_out
        for c in (every, taken, left_out):
            c["all"] = sum(c.values())
        out.append((every, taken, left_out))
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
            for every, taken, left_out in loops(ins, labels):
                print("  loop, every path: " + " ".join(f"{k} {every[k]}" for k in (*OPS, "all")))
                print("  loop, forward branches taken: " + " ".join(f"{k} {taken[k]}" for k in (*OPS, "all")))
                print("    left out: " + " ".join(f"{k} {v}" for k, v in left_out.most_common(9) if k != "all"))


if __name__ == "__main__":
    main()
