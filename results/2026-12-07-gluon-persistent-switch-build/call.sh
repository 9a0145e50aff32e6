#!/usr/bin/env bash
# The device calls this change still needs (SM90 host, project root; carry .gpu), back to back:
#   bash results/2026-12-07-gluon-persistent-switch-build/call.sh ab        (about 150 s)
#   bash results/2026-12-07-gluon-persistent-switch-build/call.sh sweep     (about 90 s)
#   bash results/2026-12-07-gluon-persistent-switch-build/call.sh requalify (about 300 s; only once `ab` took it)
# ab: scripts/gluon_ab.sh with switch.patch (its GPU tests first: the persistent many-work-items test on both tiles),
# then the 2026-12-06 decide.py rule (1 % faster at (16, 512) or (64, 512), at most 2 % slower anywhere; only
# (64, 512) dispatches a persistent tile, so the rest checks that one program per item lost nothing).
# sweep: the patched tree's Gluon tile sweep, every tile one program per item and the 128-row tiles persistent too.
# requalify: the patched tree's GPU tests, both numerics gates and the Gluon mutants (two new), signed.
set -uo pipefail
HERE=$(dirname "$0")
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source .gpu/setup.sh >/dev/null 2>&1
case ${1:?usage: call.sh ab | sweep | requalify} in
ab)
  SWEEP=0 PATCH="$HERE/switch.patch" bash scripts/gluon_ab.sh || exit $?
  python3 "$HERE/../2026-12-06-gluon-persistent-build/decide.py" /tmp/ab-out | tee "$OUT/decide.log"
  ;;
sweep)
  git apply "$HERE/switch.patch" || exit 2
  sha256sum kernels/cartridge_attn/_gluon_prefill.py kernels/cartridge_attn/gluon_host.py
  timeout 300 python3 scripts/bench_attention.py --out /tmp/sw-switch --commit switch --only prefill --tune \
    --sweep-only --prefill-impls gluon >"$OUT/sweep.log" 2>&1
  echo "sweep exit $?"
  cp /tmp/sw-switch/sweep.json "$OUT/sweep.json"
  git apply -R "$HERE/switch.patch"
  ;;
requalify)
  git apply "$HERE/switch.patch" || exit 2
  sha256sum kernels/cartridge_attn/_gluon_prefill.py kernels/cartridge_attn/gluon_host.py
  bash scripts/gpu_speed.sh requalify-gluon
  ;;
esac
