#!/usr/bin/env bash
# Session 14, call F (carry .gpu; the tree at HEAD): the Gluon mutants alone at JOBS children (8 by default: the
# count at which a child ran out of memory on an H100 last session), signed, so that a child out of memory is run
# again alone (qualify mutants, report version 3); then Nsight Compute of q-tma-info.patch's kernel at (16, 512).
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
WORK=/tmp/speed-work; mkdir -p "$WORK"
source scripts/gpu_lib.sh
source .gpu/setup.sh >/dev/null 2>&1
install; keys
nvidia-smi --query-gpu=name,memory.total --format=csv
log "Gluon mutants, --jobs ${JOBS:=8}"
signed_mutants gluon-mutation mutation-gluon "${LIMIT:-420}" "$JOBS" 360 mutation/cartridge_attn_gluon.yaml
grep -E "survived|broken|inconclusive|verdict|alone|retried|out of memory" "$WORK/gluon-mutation.log" | tail -n 12
tar -C "$WORK" -czf "$OUT/gluon-mutation.tar.gz" gluon-mutation gluon-mutation.log keys/signing-key.pub.pem
git apply results/2026-12-07-gluon-q-tma-h100/q-tma-info.patch || exit 2
echo "ncu at ${SECONDS}s"
timeout 100 ncu --clock-control none --set full --import-source no -k regex:cartridge_prefill_ws \
  --launch-skip 3 --launch-count 1 -f -o /tmp/glp-info python3 scripts/profile_decode.py --kind prefill \
  --batch 16 --live 512 --implementation fused-k16v8-gluon >/tmp/ncu-info.log 2>&1
echo "ncu exit $?"
ncu -i /tmp/glp-info.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip -9 -n >"$OUT/ncu-info-sass.csv.gz"
ncu -i /tmp/glp-info.ncu-rep --page details >"$OUT/ncu-info-details.txt" 2>&1
git apply -R results/2026-12-07-gluon-q-tma-h100/q-tma-info.patch
grep -E "Duration|Registers Per|Issued Ipc" "$OUT/ncu-info-details.txt" | head -4
echo "done"
