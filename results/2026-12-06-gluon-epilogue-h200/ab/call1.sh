#!/usr/bin/env bash
# A/B of the Gluon prefill's epilogue (new = tree, base = parent commit's kernel), then requalify-gluon on new.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
AB=/tmp/ab-out; rm -rf "$AB"; mkdir -p "$AB"
source .gpu/setup.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
K=kernels/cartridge_attn/_gluon_prefill.py
SECONDS=0
bench() {  # name impls...
  local name=$1; shift
  echo "== bench $name at ${SECONDS}s"
  timeout 150 python3 scripts/bench_attention.py --out "/tmp/ab-$name" --commit "$name" --only prefill \
    --implementations "$@" --repetitions 20 >"$AB/bench-$name.log" 2>&1
  echo "exit $?"; grep "|" "$AB/bench-$name.log" | tail -n 8
  for f in /tmp/ab-$name/*.json; do cp "$f" "$AB/$name-$(basename $f)"; done
}
cp abtmp/new.py $K; bench newa fused-k16v8 flashinfer-shared-pages-bf16 fused-k16v8-triton
cp abtmp/base.py $K; bench basea fused-k16v8
cp abtmp/new.py $K; bench newb fused-k16v8
cp abtmp/base.py $K; bench baseb fused-k16v8
cp abtmp/new.py $K
cmp -s abtmp/new.py $K && echo "kernel file is the new one again"
tar -C /tmp -czf "$OUT/ab.tar.gz" ab-out
echo "== requalify at ${SECONDS}s"
bash scripts/gpu_speed.sh requalify-gluon
echo "== profile at ${SECONDS}s"
OUT=/tmp/prof-out PROFILE_B=16 PROFILE_S=512 bash scripts/gpu_speed.sh gluon-profile 3890b64
tar -C /tmp -czf "$OUT/profile.tar.gz" prof-out
echo "== done at ${SECONDS}s"
