#!/usr/bin/env bash
# The first device call of results/2026-12-07-gluon-persistent-cut-h100 (SM90 host, project root; carry .gpu): the
# tree's Gluon tile sweep at batches 8 and 32 (4,096, 16,384 and 65,536 query rows), pick.py's cut from it, then
# scripts/gluon_ab.sh with that cut's patch (its GPU tests first) and the 2026-12-06 decide.py rule. The chosen
# patch's path is left in /tmp/cut-pick.
set -uo pipefail
HERE=$(dirname "$0")
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source .gpu/setup.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv
timeout 200 python3 scripts/bench_attention.py --out /tmp/sw-cut --commit tree --only prefill --tune \
  --sweep-only --prefill-impls gluon --batches 8 32 >"$OUT/sweep.log" 2>&1
echo "sweep exit $? at ${SECONDS}s"
cp /tmp/sw-cut/sweep.json "$OUT/sweep.json"
python3 "$HERE/pick.py" /tmp/sw-cut/sweep.json /tmp/cut-pick | tee "$OUT/pick.log" || exit 2
SWEEP=0 PATCH=$(cat /tmp/cut-pick) bash scripts/gluon_ab.sh || exit $?
python3 "$HERE/../2026-12-06-gluon-persistent-build/decide.py" /tmp/ab-out | tee "$OUT/decide.log"
echo "== done at ${SECONDS}s"
