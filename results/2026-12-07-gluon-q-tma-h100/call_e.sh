#!/usr/bin/env bash
# Session 14, call E (carry .gpu; the tree at HEAD): the 32k tile sweep (results/2026-12-07-gluon-persistent-32k-build/
# call.sh sweep), then Nsight Compute with per-SASS-line stalls of one dispatched K16/V8 Gluon launch at (16, 512).
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
W=/tmp/sw32; rm -rf $W; mkdir -p $W
OUT=$W bash results/2026-12-07-gluon-persistent-32k-build/call.sh sweep
tar -C $W -czf "$OUT/sweep32k.tar.gz" .
source .gpu/setup.sh >/dev/null 2>&1
echo "ncu at ${SECONDS}s"
timeout 120 ncu --clock-control none --set full --import-source no -k regex:cartridge_prefill_ws \
  --launch-skip 3 --launch-count 1 -f -o /tmp/glp-base python3 scripts/profile_decode.py --kind prefill \
  --batch 16 --live 512 --implementation fused-k16v8-gluon >/tmp/ncu-base.log 2>&1
echo "ncu exit $? at ${SECONDS}s"
ncu -i /tmp/glp-base.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip -9 -n >"$OUT/ncu-base-sass.csv.gz"
ncu -i /tmp/glp-base.ncu-rep --page details >"$OUT/ncu-base-details.txt" 2>&1
ncu -i /tmp/glp-base.ncu-rep --page raw --csv 2>/dev/null | gzip -9 -n >"$OUT/ncu-base-raw.csv.gz"
grep -E "Duration|Grid Size|Registers Per|Achieved Occupancy|Issued Ipc" "$OUT/ncu-base-details.txt" | head
echo "done at ${SECONDS}s"
