"""Where one Gluon prefill launch's warps stall, from Nsight Compute's per-SASS-line sampling (`--page source
--print-source sass --csv`, gzipped).

It prints:
- the sampled share of each partition. A partition is a region between setmaxnreg and EXIT instructions, named by
  what it issues (below). The out-of-line retry blocks of barrier waits sit after the last EXIT and count as "other",
  with the padding warp that idles at a barrier.
- the consumers' stall reasons ("selected" is a warp that issued, not a stall).
- each consumer's work-item start, in code order (the second warpgroup's partition comes first in these builds): from
  its first global load or barrier wait to the wait for its first QK^T wgmma. It includes that QK^T and the
  ping-pong wait for the turn to issue.

    python3 consumer_stalls.py callE/ncu-base-sass.csv.gz callF/ncu-info-sass.csv.gz
"""

from __future__ import annotations

import csv
import gzip
import sys
from collections import Counter


def _kind(ops: set[str]) -> str:
    """A region's partition, by the instructions it issues: wgmma (consumer), TMA loads (producer), shared-memory
    loads and stores (stager, which converts and zeroes V stages); else other (setup, retry blocks)."""
    if "HGMMA" in ops:
        return "consumer"
    if "UTMALDG" in ops:
        return "producer"
    return "stager" if {"LDS", "STS"} <= ops else "other"


def _op(sass: str) -> str:
    """The opcode of a SASS line, without its predicate (``@!P1 BRA ...`` is BRA) or modifiers."""
    words = sass.split()
    word = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
    return word.split(".")[0]


def main(path: str) -> None:
    with gzip.open(path, "rt") as f:
        rows = list(csv.reader(f))
    head, lines = rows[1], rows[2:]  # row 0 names the kernel
    samples, source = head.index("# Samples"), head.index("Source")
    reasons = [c for c in head if c.startswith("stall_") and "Not Issued" not in c]
    n = [int(r[samples]) for r in lines]
    ops = [_op(r[source].strip()) for r in lines]
    total = sum(n)
    cuts = [i for i, op in enumerate(ops) if op in ("USETMAXREG", "EXIT")]
    kinds: Counter[str] = Counter()
    stalls: Counter[str] = Counter()
    starts = []
    for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True):
        kind = _kind(set(ops[a:b]))
        kinds[kind] += sum(n[a:b])
        if kind != "consumer":
            continue
        for c in reasons:
            stalls[c[6:]] += sum(int(r[head.index(c)]) for r in lines[a:b])
        first = next(i for i in range(a, b) if ops[i] in ("LDG", "SYNCS"))
        first_mma = next(i for i in range(a, b) if ops[i] == "HGMMA")
        first_wait = next(i for i in range(first_mma, b) if ops[i] == "WARPGROUP")
        starts.append(sum(n[first : first_wait + 1]))
    cons = kinds["consumer"]
    print(f"{path}: {total} samples; " + ", ".join(f"{k} {100 * v / total:.1f} %" for k, v in kinds.most_common()))
    print("  consumers' stall reasons: " + ", ".join(f"{k} {100 * v / cons:.1f} %" for k, v in stalls.most_common(6)))
    print(f"  consumers' work-item starts: {' + '.join(map(str, starts))} samples, {100 * sum(starts) / cons:.1f} %")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
