"""Whether the A/B's new side is taken, for a change to the two-per-SM tile: the mean of its two runs against the
base's, per layer, at every point (the logs of scripts/gluon_ab.sh), judged where that tile runs, (16, 128) and
(1, 512). A screen, not a verdict: one A/B's unchanged points have spread up to 2.7 %, and the perf gate decides.

    python3 decide.py AB_DIR        (exit 0: TAKE, 3: KEEP BASE)
"""

import sys
from pathlib import Path

TWO_PER_SM_POINTS = [(16, 128), (1, 512)]


def means(ab: Path, side: str) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], list[float]] = {}
    for run in "ab":
        for line in (ab / f"bench-{side}{run}.log").read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) > 3 and cells[0] == "prefill":
                out.setdefault((int(cells[1]), int(cells[2])), []).append(float(cells[3]))
    return {k: sum(v) / len(v) for k, v in out.items()}


def main() -> int:
    ab = Path(sys.argv[1])
    new, base = means(ab, "new"), means(ab, "base")
    ratios = {k: new[k] / base[k] for k in base}
    for k, r in sorted(ratios.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"{k}: new {new[k]:.1f} base {base[k]:.1f} ratio {r:.3f}")
    served = [ratios[k] for k in TWO_PER_SM_POINTS]
    take = sum(served) / len(served) <= 0.99 and max(served) <= 1.0 and max(ratios.values()) <= 1.02
    print("TAKE" if take else "KEEP BASE")
    return 0 if take else 3


if __name__ == "__main__":
    sys.exit(main())
