"""Where one Gluon prefill launch's warps stall, from Nsight Compute's per-SASS-line sampling (`--page source
--print-source sass --csv`, gzipped): the sampled share of each partition (the regions between setmaxnreg / EXIT
instructions, named by what they issue), the consumers' top stall reasons, and each consumer's work-item start (from
its first global load or barrier wait to the wait for its first QK^T wgmma).

    python3 consumer_stalls.py callE/ncu-base-sass.csv.gz callF/ncu-info-sass.csv.gz
"""

from __future__ import annotations

import csv
import gzip
import sys
from collections import Counter

# A partition is named by the first of these instructions it issues.
_ISSUES = (("consumer", "HGMMA"), ("producer", "UTMALDG"), ("stager", "STS"))


def main(path: str) -> None:
    with gzip.open(path, "rt") as f:
        rows = list(csv.reader(f))
    head, lines = rows[1], rows[2:]
    samples, source = head.index("# Samples"), head.index("Source")
    reasons = [c for c in head if c.startswith("stall_") and "Not Issued" not in c]
    n = [int(r[samples]) for r in lines]
    sass = [r[source].strip() for r in lines]
    total = sum(n)
    cuts = [i for i, s in enumerate(sass) if "USETMAXREG" in s or s == "EXIT"]
    bounds = list(zip([0, *cuts], [*cuts, len(lines)], strict=True))
    kinds: Counter[str] = Counter()
    stalls: Counter[str] = Counter()
    starts = []
    for a, b in bounds:
        text = " ".join(sass[a:b])
        kind = next((k for k, op in _ISSUES if op in text), "other")
        kinds[kind] += sum(n[a:b])
        if kind != "consumer":
            continue
        for c in reasons:
            stalls[c[6:]] += sum(int(r[head.index(c)]) for r in lines[a:b])
        # A work item starts at its first global load or barrier wait, whichever comes first.
        first = next(i for i in range(a, b) if sass[i].startswith("LDG") or "TRYWAIT" in sass[i])
        first_mma = next(i for i in range(a, b) if "HGMMA" in sass[i])
        first_wait = next(i for i in range(first_mma, b) if sass[i].startswith("WARPGROUP.DEPBAR"))
        starts.append(sum(n[first : first_wait + 1]))
    cons = kinds["consumer"]
    print(f"{path}: {total} samples; " + ", ".join(f"{k} {100 * v / total:.1f} %" for k, v in kinds.most_common()))
    print("  consumers' stall reasons: " + ", ".join(f"{k} {100 * v / cons:.1f} %" for k, v in stalls.most_common(6)))
    print(f"  consumers' work-item starts: {' + '.join(map(str, starts))} samples, {100 * sum(starts) / cons:.1f} %")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
