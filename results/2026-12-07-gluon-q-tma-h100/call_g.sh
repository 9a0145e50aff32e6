#!/usr/bin/env bash
# Queries by TMA alone (q-tma.patch) on the SM90 host, from the repository root of 568db7a or later plus this record
# (carry .gpu), in two device calls, back to back:
#   bash results/2026-12-07-gluon-q-tma-h100/call_g.sh ab          # ~115 s: its GPU tests, A/B, decide.py
#   bash results/2026-12-07-gluon-q-tma-h100/call_g.sh requalify   # ~300 s, only once `ab` printed TAKE
# ab: SWEEP=0 PATCH=q-tma.patch scripts/gluon_ab.sh (the tree is put back after), then decide.py on the A/B.
# requalify: the patched tree's GPU tests, both numerics gates and the Gluon mutants, signed (scripts/gpu_speed.sh
# requalify-gluon), after the sha256 of every file the patch touches and of the gate files.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
P=results/2026-12-07-gluon-q-tma-h100/q-tma.patch
case ${1:?usage: call_g.sh ab | requalify} in
ab)
  SWEEP=0 PATCH=$P bash scripts/gluon_ab.sh
  rc=$?; echo "gluon_ab exit $rc at ${SECONDS}s"
  [ "$rc" -eq 0 ] || exit "$rc"
  rm -rf /tmp/abx && mkdir -p /tmp/abx && tar -xzf "$OUT/ab.tar.gz" -C /tmp/abx
  python3 results/2026-12-06-gluon-persistent-build/decide.py /tmp/abx/ab-out | tee "$OUT/decide.log"
  ;;
requalify)
  git apply "$P" || exit 2
  mapfile -t files < <(git apply --numstat -R "$P" | cut -f3)
  sha256sum "${files[@]}" gates/kernel_numerics_gluon.yaml gates/kernel_numerics.yaml
  GLUON_TESTS_S=150 bash scripts/gpu_speed.sh requalify-gluon
  echo "requalify done at ${SECONDS}s"
  ;;
esac
