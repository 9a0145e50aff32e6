#!/usr/bin/env bash
# The device calls this change needs (SM90 host, project root; carry .gpu), back to back:
#   bash results/2026-12-07-gluon-persistent-32k-build/call.sh sweep      (about 130 s)
#   bash results/2026-12-07-gluon-persistent-32k-build/call.sh requalify  (about 260-310 s; only once `sweep` took it)
# sweep: the tree's Gluon tile sweep at batches 12 and 48, twice (24,576 query rows at 12 x 512 and 48 x 128, the
# rows between 16,384 and 32,768 that no sweep has timed; 6,144 and 98,304 beside them), then pick.py.
# requalify: the patched tree's GPU tests, both numerics gates (their Gluon envelope edges move to 8,191 / 8,192
# tokens at group 4) and the Gluon mutants, signed.
set -uo pipefail
HERE=$(dirname "$0")
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source .gpu/setup.sh >/dev/null 2>&1
case ${1:?usage: call.sh sweep | requalify} in
sweep)
  nvidia-smi --query-gpu=name,driver_version --format=csv
  for run in a b; do
    timeout 200 python3 scripts/bench_attention.py --out "/tmp/sw-24k-$run" --commit tree --only prefill --tune \
      --sweep-only --prefill-impls gluon --batches 12 48 >"$OUT/sweep-$run.log" 2>&1
    echo "sweep $run exit $? at ${SECONDS}s"
    cp "/tmp/sw-24k-$run/sweep.json" "$OUT/sweep-$run.json"
  done
  python3 "$HERE/pick.py" "$OUT/sweep-a.json" "$OUT/sweep-b.json" | tee "$OUT/pick.log"
  ;;
requalify)
  git apply "$HERE/cut-32k.patch" || exit 2
  sha256sum kernels/cartridge_attn/_gluon_prefill.py kernels/cartridge_attn/heuristics.py \
    gates/kernel_numerics_gluon.yaml
  bash scripts/gpu_speed.sh requalify-gluon
  ;;
esac
