#!/usr/bin/env bash
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source .gpu/setup.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
SECONDS=0
for rep in 1 2; do
echo "== sweep $rep (HEAD kernel) at ${SECONDS}s"
timeout 200 python3 scripts/bench_attention.py --out /tmp/ab-sweep$rep --commit "$(git rev-parse --short HEAD)" --only prefill --tune --sweep-only \
  --prefill-impls gluon >"$OUT/sweep$rep.log" 2>&1
echo "sweep exit $?"
cp /tmp/ab-sweep$rep/sweep.json "$OUT/sweep$rep.json"
python3 - /tmp/ab-sweep$rep/sweep.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["sweep"]:
    c = r["config"]
    print(r["batch"], r["tokens"], f"m{c['block_m']}n{c['block_n']}s{c['num_stages']}",
          r.get("per_layer_us") or r.get("error", "")[:160], (r.get("binary") or {}).get("registers"))
PY
done
echo "== done at ${SECONDS}s"
