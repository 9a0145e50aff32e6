"""Whether the A/B's new side is taken, for a change to the two-per-SM tile, judged where that tile runs: (16, 128)
and (1, 512). The per-point means of each side's two runs, and their ratios, are those that
results/2026-12-06-gluon-persistent-build/decide.py prints for the A/B (scripts/gluon_ab.sh's logs); its own rule is
for the persistent tile's points. A screen, not a verdict: one A/B's unchanged points have spread up to 2.7 %, and
the perf gate decides.

    python3 decide.py AB_DIR        (exit 0: TAKE, 3: KEEP BASE, 2: no ratio at those points, e.g. a bench log
                                     missing after a timeout; the other script's errors are passed through)
"""

import re
import subprocess
import sys
from pathlib import Path

MEANS = Path(__file__).parents[1] / "2026-12-06-gluon-persistent-build" / "decide.py"
TWO_PER_SM_POINTS = [(16, 128), (1, 512)]
LINE = re.compile(r"^\((\d+), (\d+)\): new [\d.]+ base [\d.]+ ratio ([\d.]+)$")


def main() -> int:
    printed = subprocess.run([sys.executable, str(MEANS), sys.argv[1]], stdout=subprocess.PIPE, text=True).stdout
    points = [m for m in map(LINE.match, printed.splitlines()) if m]  # not its verdict, which is another rule's
    for m in points:
        print(m[0])
    ratios = {(int(m[1]), int(m[2])): float(m[3]) for m in points}
    if not all(k in ratios for k in TWO_PER_SM_POINTS):
        print(f"decide.py: the A/B has no ratio at {TWO_PER_SM_POINTS}", file=sys.stderr)
        return 2
    served = [ratios[k] for k in TWO_PER_SM_POINTS]
    take = sum(served) / len(served) <= 0.99 and max(served) <= 1.0 and max(ratios.values()) <= 1.02
    print(f"two-per-SM points: {TWO_PER_SM_POINTS} ratios {served}: {'TAKE' if take else 'KEEP BASE'}")
    return 0 if take else 3


if __name__ == "__main__":
    sys.exit(main())
