#!/usr/bin/env bash
# Session 14, call C (carry .gpu; the tree at HEAD): A/B of q-tma-info.patch (queries by TMA and the work item's
# integers from the producer), its GPU tests first; if those fail, A/B of q-tma.patch (queries by TMA only). No tile
# sweeps. decide.py on the A/B that ran; prints CHOSEN=<patch> when it takes it.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
D=results/2026-12-07-gluon-q-tma-h100
for P in $D/q-tma-info.patch $D/q-tma.patch; do
  name=$(basename "$P" .patch)
  SWEEP=0 PATCH=$P bash scripts/gluon_ab.sh
  rc=$?; echo "gluon_ab $name exit $rc at ${SECONDS}s"
  mv "$OUT/ab.tar.gz" "$OUT/ab-$name.tar.gz"
  [ "$rc" -eq 1 ] && continue  # its GPU tests failed: the next candidate
  [ "$rc" -eq 0 ] || exit "$rc"
  rm -rf /tmp/abx && mkdir -p /tmp/abx && tar -xzf "$OUT/ab-$name.tar.gz" -C /tmp/abx
  python3 results/2026-12-06-gluon-persistent-build/decide.py /tmp/abx/ab-out | tee "$OUT/decide-$name.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] && echo "CHOSEN=$P"
  break
done
echo "done at ${SECONDS}s"
