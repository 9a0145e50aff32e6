#!/usr/bin/env bash
# Three A/Bs of the Gluon prefill in one device call (carry .gpu; repository root of 25249fe or later plus this
# record), each `SWEEP=0 PATCH=… scripts/gluon_ab.sh` then decide.py, each against the tree:
#   qtma: queries by TMA alone (results/2026-12-07-gluon-q-tma-h100/q-tma.patch, that record's call G);
#   stages3: a third ring stage for the persistent grid's 128 x 128 tiles where 16-bit live values leave room
#     (stages3.patch: the shared-memory slack cut from 12 KiB to 2 KiB, the most seen being 520 bytes);
#   stages3-nopingpong: the same without the consumers' turns on the persistent grid (one arrive and one wait fewer
#     per tile and warpgroup).
#   bash results/2026-12-07-gluon-third-stage/call.sh [NAME ...]     (~120 s each; all three by default)
# Each side's files come back under $OUT/<name>/ (ab.tar.gz, decide.log).
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
ab() {  # name patch
  local out=$OUT/$1
  mkdir -p "$out"
  echo "==== $1 at ${SECONDS}s"
  OUT=$out SWEEP=0 PATCH=$2 AB_DIR=/tmp/ab-$1/ab-out bash scripts/gluon_ab.sh
  local rc=$?
  echo "gluon_ab $1 exit $rc at ${SECONDS}s"
  [ "$rc" -eq 0 ] || return
  python3 results/2026-12-06-gluon-persistent-build/decide.py "/tmp/ab-$1/ab-out" | tee "$out/decide.log"
}
declare -A patch=(
  [qtma]=results/2026-12-07-gluon-q-tma-h100/q-tma.patch
  [stages3]=results/2026-12-07-gluon-third-stage/stages3.patch
  [stages3-nopingpong]=results/2026-12-07-gluon-third-stage/stages3-nopingpong.patch
)
names=("$@"); [ "${#names[@]}" -gt 0 ] || names=(stages3-nopingpong stages3 qtma)
for name in "${names[@]}"; do
  [ -n "${patch[$name]:-}" ] || { echo "call.sh: no candidate named $name (qtma, stages3, stages3-nopingpong)"; exit 2; }
done
for name in "${names[@]}"; do ab "$name" "${patch[$name]}"; done
git status --short
echo "done at ${SECONDS}s"
