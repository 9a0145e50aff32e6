#!/usr/bin/env bash
# A/B of Gluon prefill variants in one call (not committed).
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source .gpu/setup.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
K=kernels/cartridge_attn/_gluon_prefill.py
SECONDS=0
cp abtmp/tree.py $K
echo "== GPU tests (tree) at ${SECONDS}s"
timeout 200 python3 -m pytest tests/kernels/test_gluon_prefill_gpu.py tests/kernels/test_gluon_api.py tests/kernels/test_dispatch.py -q -rs -n 8 -p no:cacheprovider >"$OUT/tests.log" 2>&1
echo "pytest exit $?"; grep -E "passed|failed|^FAILED|^ERROR" "$OUT/tests.log" | tail -n 12
bench() {  # name impls...
  local name=$1; shift
  echo "== bench $name at ${SECONDS}s"
  timeout 150 python3 scripts/bench_attention.py --out "/tmp/ab-$name" --commit "$name" --only prefill \
    --implementations "$@" --repetitions 20 >"$OUT/bench-$name.log" 2>&1
  echo "exit $?"; grep "|" "$OUT/bench-$name.log" | tail -n 8
  cp /tmp/ab-$name/*.json "$OUT/" 2>/dev/null; for f in /tmp/ab-$name/*.json; do cp "$f" "$OUT/$name-$(basename $f)"; done
}
bench tree1 fused-k16v8 fused-k16v8-triton flashinfer-shared-pages-bf16
cp abtmp/merged.py $K; bench merged fused-k16v8
cp abtmp/base.py $K; bench base fused-k16v8
cp abtmp/tree.py $K; bench tree2 fused-k16v8
echo "== sweep (tree) at ${SECONDS}s"
timeout 200 python3 scripts/bench_attention.py --out /tmp/ab-sweep --commit tree --only prefill --tune --sweep-only \
  --prefill-impls gluon >"$OUT/sweep.log" 2>&1
echo "sweep exit $?"
cp /tmp/ab-sweep/sweep.json "$OUT/sweep.json"
python3 - /tmp/ab-sweep/sweep.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["sweep"]:
    c = r["config"]
    print(r["batch"], r["tokens"], f"m{c['block_m']}n{c['block_n']}s{c['num_stages']}",
          r.get("per_layer_us") or r.get("error", "")[:160], (r.get("binary") or {}).get("registers"))
PY
echo "== done at ${SECONDS}s"
