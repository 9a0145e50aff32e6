#!/usr/bin/env bash
# Session 14, call G (carry .gpu; the tree at HEAD 568db7a plus this record): A/B of q-tma.patch alone (queries by
# TMA; the consumers still read the plan), its GPU tests first, no tile sweeps; when decide.py takes it, the patched
# tree's requalification (GPU tests, both numerics gates, the Gluon mutants, signed) in the same call.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
P=results/2026-12-07-gluon-q-tma-h100/q-tma.patch
SWEEP=0 PATCH=$P bash scripts/gluon_ab.sh
rc=$?; echo "gluon_ab exit $rc at ${SECONDS}s"
[ "$rc" -eq 0 ] || exit "$rc"
rm -rf /tmp/abx && mkdir -p /tmp/abx && tar -xzf "$OUT/ab.tar.gz" -C /tmp/abx
python3 results/2026-12-06-gluon-persistent-build/decide.py /tmp/abx/ab-out | tee "$OUT/decide.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 0
git apply "$P" || exit 2
sha256sum kernels/cartridge_attn/_gluon_prefill.py kernels/cartridge_attn/gluon_host.py \
  kernels/cartridge_attn/heuristics.py gates/kernel_numerics_gluon.yaml gates/kernel_numerics.yaml \
  mutation/cartridge_attn_gluon.yaml
GLUON_TESTS_S=150 bash scripts/gpu_speed.sh requalify-gluon
echo "requalify done at ${SECONDS}s"
