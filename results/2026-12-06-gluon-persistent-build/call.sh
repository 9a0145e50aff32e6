#!/usr/bin/env bash
# The device call this change still needs (SM90 host, carry .gpu; project root; about 400 s):
#   bash results/2026-12-06-gluon-persistent-build/call.sh            (REQUALIFY=0: the A/B and a tile sweep only)
# The A/B of persistent.patch against the tree (scripts/gluon_ab.sh, no sweeps: its GPU tests first, then the
# interleaved benches), then decide.py on the benches; if the persistent grid is taken, the patched tree's
# requalification (GPU tests, both numerics gates and the Gluon mutants, signed); if not, its Gluon tile sweep.
set -uo pipefail
HERE=$(dirname "$0")
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
SWEEP=0 PATCH="$HERE/persistent.patch" bash scripts/gluon_ab.sh
rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
python3 "$HERE/decide.py" /tmp/ab-out | tee "$OUT/decide.log"
take=${PIPESTATUS[0]}
git apply "$HERE/persistent.patch"
sha256sum kernels/cartridge_attn/_gluon_prefill.py kernels/cartridge_attn/gluon_host.py
if [ "$take" -eq 0 ] && [ "${REQUALIFY:-1}" = 1 ]; then
  bash scripts/gpu_speed.sh requalify-gluon
else
  timeout 170 python3 scripts/bench_attention.py --out /tmp/ab-sweep-new --commit new --only prefill --tune \
    --sweep-only --prefill-impls gluon >"$OUT/sweep-new.log" 2>&1
  cp /tmp/ab-sweep-new/sweep.json "$OUT/sweep-new.json"
fi
