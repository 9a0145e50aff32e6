#!/usr/bin/env bash
# The device calls this candidate needs (SM90 host, repository root of the commit that adds this record; carry .gpu),
# back to back:
#   bash results/2026-12-07-gluon-two-per-sm-s3-build/call.sh sweep      (~60-120 s) every Gluon tile of the sweep
#        list at the six prefill points (64 x 64 over 3 stages among them): gpu_speed.sh gluon-bench with GLUON_SWEEP=1
#   bash results/2026-12-07-gluon-two-per-sm-s3-build/call.sh ab         (~120 s) two-per-sm-s3.patch: its GPU tests,
#        then the A/B against the tree (scripts/gluon_ab.sh) and decide.py
#   bash results/2026-12-07-gluon-two-per-sm-s3-build/call.sh requalify  (~300 s; only once `ab` printed TAKE) the
#        patched tree's GPU tests, both numerics gates and the Gluon mutants, signed, after the sha256 of every file
#        the patch touches and of the gate files
set -uo pipefail
HERE=results/2026-12-07-gluon-two-per-sm-s3-build
P=$HERE/two-per-sm-s3.patch
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
case ${1:?usage: call.sh sweep | ab | requalify} in
sweep)
  GLUON_SWEEP=1 bash scripts/gpu_speed.sh gluon-bench tree
  ;;
ab)
  SWEEP=0 PATCH=$P AB_DIR=/tmp/ab-s3/ab-out bash scripts/gluon_ab.sh
  rc=$?; echo "gluon_ab exit $rc at ${SECONDS}s"
  [ "$rc" -eq 0 ] || exit "$rc"
  python3 "$HERE/decide.py" /tmp/ab-s3/ab-out | tee "$OUT/decide.log"
  ;;
requalify)
  git apply "$P" || exit 2
  mapfile -t files < <(git apply --numstat -R "$P" | cut -f3)
  sha256sum "${files[@]}" gates/kernel_numerics_gluon.yaml gates/kernel_numerics.yaml | tee "$OUT/tree-sha256.txt"
  bash scripts/gpu_speed.sh requalify-gluon two-per-sm-s3
  ;;
esac
