#!/usr/bin/env bash
# This session's first device call: the switch A/B, the ping-pong A/B (SWEEP=0 each), then the tile sweep of both.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT/sw" "$OUT/pp"
D=results/2026-12-06-gluon-persistent-build/decide.py
source .gpu/setup.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv
OUT="$OUT/sw" AB_DIR=/tmp/ab-sw SWEEP=0 PATCH=results/2026-12-07-gluon-persistent-switch-build/switch.patch \
  bash scripts/gluon_ab.sh; echo "switch ab rc $?"
python3 $D /tmp/ab-sw | tee "$OUT/sw/decide.log"
OUT="$OUT/pp" AB_DIR=/tmp/ab-pp SWEEP=0 PATCH=scratch-pp/pingpong.patch bash scripts/gluon_ab.sh; echo "pingpong ab rc $?"
python3 $D /tmp/ab-pp | tee "$OUT/pp/decide.log"
git apply scratch-pp/both.patch || exit 2
sha256sum kernels/cartridge_attn/_gluon_prefill.py kernels/cartridge_attn/gluon_host.py
timeout 170 python3 scripts/bench_attention.py --out /tmp/sw-both --commit both --only prefill --tune \
  --sweep-only --prefill-impls gluon >"$OUT/sweep-both.log" 2>&1
echo "sweep exit $?"
cp /tmp/sw-both/sweep.json "$OUT/sweep-both.json"
git apply -R scratch-pp/both.patch
grep "|" "$OUT/sweep-both.log" | tail -n 45
echo "== base sweep at ${SECONDS}s"
timeout 170 python3 scripts/bench_attention.py --out /tmp/sw-base --commit base --only prefill --tune \
  --sweep-only --prefill-impls gluon >"$OUT/sweep-base.log" 2>&1
echo "sweep exit $?"
cp /tmp/sw-base/sweep.json "$OUT/sweep-base.json"
echo "== done at ${SECONDS}s"
