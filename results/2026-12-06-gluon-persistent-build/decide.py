"""Whether the A/B's new side is taken: the mean of its two runs against the base's, per layer, at every point."""

import sys
from pathlib import Path

ab = Path(sys.argv[1])


def means(side: str) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], list[float]] = {}
    for run in "ab":
        for line in (ab / f"bench-{side}{run}.log").read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) > 3 and cells[0] == "prefill":
                out.setdefault((int(cells[1]), int(cells[2])), []).append(float(cells[3]))
    return {k: sum(v) / len(v) for k, v in out.items()}


new, base = means("new"), means("base")
ratios = {k: new[k] / base[k] for k in base}
for k, r in sorted(ratios.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"{k}: new {new[k]:.1f} base {base[k]:.1f} ratio {r:.3f}")
take = min(ratios[(16, 512)], ratios[(64, 512)]) <= 0.99 and max(ratios.values()) <= 1.02
print("TAKE" if take else "KEEP BASE")
sys.exit(0 if take else 3)
