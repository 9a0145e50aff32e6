"""Whether the persistent 128 x 128 tile loses to the two-per-SM 64 x 64 tile at 24,576 query rows, (12, 512) and
(48, 128), the rows between the two cuts, in the mean of the sweeps given: if it is more than 1 % slower at either,
the cut belongs at 32,767 (cut-32k.patch); else 16,384 stands. Prints every timed point and the choice."""

import json
import sys
from pathlib import Path


def us(sweeps: list[list[dict]], batch: int, tokens: int, block_m: int, block_n: int, persistent: bool) -> float:
    times = [r["per_layer_us"] for sweep in sweeps for r in sweep if (r["batch"], r["tokens"]) == (batch, tokens)
             and (r["config"]["block_m"], r["config"]["block_n"], r["config"]["num_stages"]) == (block_m, block_n, 2)
             and r["config"]["persistent"] == persistent]  # fmt: skip
    if len(times) != len(sweeps):
        raise SystemExit(f"({batch}, {tokens}): {len(times)} timings in {len(sweeps)} sweeps")
    return sum(times) / len(times)


sweeps = [json.loads(Path(p).read_text())["sweep"] for p in sys.argv[1:]]
loses = []
for batch, tokens in [(12, 128), (12, 512), (48, 128), (48, 512)]:
    rows = batch * tokens * 4
    two, per = us(sweeps, batch, tokens, 64, 64, False), us(sweeps, batch, tokens, 128, 128, True)
    print(f"({batch}, {tokens}) {rows} rows: 64x64 two per SM {two:.1f} us, 128x128 persistent {per:.1f} us")
    if rows == 24576:
        loses.append(per > 1.01 * two)
print("TAKE cut-32k.patch" if any(loses) else "KEEP 16,384")
sys.exit(0 if any(loses) else 3)
