#!/usr/bin/env bash
# A/B of the Gluon prefill's rescale placement in one call (not committed).
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source .gpu/setup.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
K=kernels/cartridge_attn/_gluon_prefill.py
SECONDS=0
cp abtmp/new3.py $K
echo "== GPU tests (new3) at ${SECONDS}s"
timeout 200 python3 -m pytest tests/kernels/test_gluon_prefill_gpu.py tests/kernels/test_gluon_api.py tests/kernels/test_dispatch.py -q -rs -n 8 -p no:cacheprovider >"$OUT/tests.log" 2>&1
echo "pytest exit $?"; grep -E "passed|failed|^FAILED|^ERROR" "$OUT/tests.log" | tail -n 12
bench() {  # name impls...
  local name=$1; shift
  echo "== bench $name at ${SECONDS}s"
  timeout 150 python3 scripts/bench_attention.py --out "/tmp/ab-$name" --commit "$name" --only prefill \
    --implementations "$@" --repetitions 20 >"$OUT/bench-$name.log" 2>&1
  echo "exit $?"; grep "|" "$OUT/bench-$name.log" | tail -n 8
  for f in /tmp/ab-$name/*.json; do cp "$f" "$OUT/$name-$(basename $f)"; done
}
cp abtmp/new.py $K; bench newa fused-k16v8 flashinfer-shared-pages-bf16
cp abtmp/base.py $K; bench basea fused-k16v8
cp abtmp/new2.py $K; bench new2a fused-k16v8
cp abtmp/new3.py $K; bench new3a fused-k16v8
cp abtmp/new.py $K; bench newb fused-k16v8
cp abtmp/base.py $K; bench baseb fused-k16v8
cp abtmp/new2.py $K; bench new2b fused-k16v8
cp abtmp/new3.py $K; bench new3b fused-k16v8
cp abtmp/new.py $K
if [ "${SWEEP:-0}" = 1 ]; then
cp abtmp/new2.py $K
echo "== sweep (new2) at ${SECONDS}s"
timeout 170 python3 scripts/bench_attention.py --out /tmp/ab-sweep --commit new2 --only prefill --tune --sweep-only \
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
fi
echo "== done at ${SECONDS}s"
