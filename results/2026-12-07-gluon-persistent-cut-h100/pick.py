"""Which cut the sweep at 16,384 query rows argues for: the dispatched persistent tile (128 x 128, 2 stages) against
the two-per-SM 64 x 64 tile at (8, 512) and (32, 128). The persistent tile must win at both for the 8,192 cut; else
16,384 stands. Prints every timed point, then the patch."""

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
sweep = json.loads(Path(sys.argv[1]).read_text())["sweep"]


def us(batch: int, tokens: int, block_m: int, block_n: int, persistent: bool) -> float:
    (t,) = [r["per_layer_us"] for r in sweep if (r["batch"], r["tokens"]) == (batch, tokens)
            and (r["config"]["block_m"], r["config"]["block_n"], r["config"]["num_stages"]) == (block_m, block_n, 2)
            and r["config"]["persistent"] == persistent]  # fmt: skip
    return t


wins = []
for batch, tokens in [(8, 128), (8, 512), (32, 128), (32, 512)]:
    rows = batch * tokens * 4
    two, per = us(batch, tokens, 64, 64, False), us(batch, tokens, 128, 128, True)
    print(f"({batch}, {tokens}) {rows} rows: 64x64 two per SM {two:.1f} us, 128x128 persistent {per:.1f} us")
    if rows == 16384:
        wins.append(per < two)
cut = "8k" if all(wins) else "16k"
print(f"cut {cut}: {HERE / f'cut-{cut}.patch'}")
Path(sys.argv[2]).write_text(str(HERE / f"cut-{cut}.patch"))
