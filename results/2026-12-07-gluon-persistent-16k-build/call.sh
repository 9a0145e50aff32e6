#!/usr/bin/env bash
# The device calls this change needs (SM90 host, project root; carry .gpu), back to back:
#   bash results/2026-12-07-gluon-persistent-16k-build/call.sh sweep     (about 90 s)
#   bash results/2026-12-07-gluon-persistent-16k-build/call.sh ab        (about 110 s)
#   bash results/2026-12-07-gluon-persistent-16k-build/call.sh requalify (about 310 s; only once `ab` took it)
# sweep: the tree's Gluon tile sweep at batches 8 and 32 (16,384 query rows at 8 x 512 and 32 x 128, the rows the cut
# moves over; 4,096 and 65,536 beside them), so that the persistent 128-row tiles and the two-per-SM 64 x 64 tile are
# timed where cut.patch hands the rows from one to the other.
# ab: scripts/gluon_ab.sh with cut.patch (its GPU tests first), then the 2026-12-06 decide.py rule (1 % faster at
# (16, 512) or (64, 512), at most 2 % slower anywhere; (64, 128) and (16, 512) are the points whose tile changes).
# requalify: the patched tree's GPU tests, both numerics gates (their Gluon envelope edges move with the cut) and the
# Gluon mutants, signed.
set -uo pipefail
HERE=$(dirname "$0")
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source .gpu/setup.sh >/dev/null 2>&1
case ${1:?usage: call.sh sweep | ab | requalify} in
sweep)
  timeout 300 python3 scripts/bench_attention.py --out /tmp/sw-16k --commit tree --only prefill --tune \
    --sweep-only --prefill-impls gluon --batches 8 32 >"$OUT/sweep.log" 2>&1
  echo "sweep exit $?"
  cp /tmp/sw-16k/sweep.json "$OUT/sweep.json"
  ;;
ab)
  SWEEP=0 PATCH="$HERE/cut.patch" bash scripts/gluon_ab.sh || exit $?
  python3 "$HERE/../2026-12-06-gluon-persistent-build/decide.py" /tmp/ab-out | tee "$OUT/decide.log"
  ;;
requalify)
  git apply "$HERE/cut.patch" || exit 2
  sha256sum kernels/cartridge_attn/heuristics.py gates/kernel_numerics_gluon.yaml
  bash scripts/gpu_speed.sh requalify-gluon
  ;;
esac
