#!/usr/bin/env bash
# The first device call, prepared on 2026-12-07 and not yet run: COMMIT=<the commit whose tree travels> bash
# results/2026-12-07-gluon-exp2-fma-build/call1.sh, carrying .gpu. gpu_speed.sh gluon-profile on the tree as it is:
# its per-layer prefill benchmark of four implementations, then Nsight Compute of one point: (64, 512), the perf
# gate's worst prefill point, on an H200 (whose perf-gate calls come next), else (16, 128). On an H100, then the A/B
# of each FMA-exponential patch (about 100 + 2 x 150 s); decide each with
# results/2026-12-06-gluon-persistent-build/decide.py on its unpacked ab-*.tar.gz.
set -uo pipefail
# Checked before any device time is spent on the call, not halfway through it.
: "${COMMIT:?call1.sh: set COMMIT to the commit whose tree travels}"
R=results/2026-12-07-gluon-exp2-fma-build
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv
  source .gpu/setup.sh >/dev/null 2>&1
  python3 -c 'import torch, triton, flashinfer; print("torch", torch.__version__, "triton", triton.__version__,
    "flashinfer", flashinfer.__version__)' 2>&1
  ncu --version | tail -n 1
} | tee "$OUT/gpu.txt"
sha256sum kernels/cartridge_attn/*.py gates/kernel_numerics*.yaml gates/perf.yaml gates/gpu/perf_targets.yaml \
  scripts/gpu_speed.sh scripts/gluon_ab.sh scripts/bench_attention.py scripts/profile_decode.py "$R"/*.patch \
  >"$OUT/tree-sha256.txt"
if [[ $name == *H200* ]]; then b=64 s=512; else b=16 s=128; fi
# The host has no .git, so the tree is named here (its files' sha256 are in tree-sha256.txt). gpu_speed.sh's exit is
# its last copy's; the log says how the benchmark and each ncu run ended. A warm re-run must not tar old files.
rm -rf /tmp/prof /tmp/speed-work/gluon-profile
OUT=/tmp/prof PROFILE_B=$b PROFILE_S=$s bash scripts/gpu_speed.sh gluon-profile "$COMMIT-dirty" \
  >/tmp/prof-call.log 2>&1
grep -v '^\s*$' /tmp/prof-call.log | tail -n 30
cp /tmp/prof-call.log /tmp/prof/
tar -C /tmp -czf "$OUT/profile-${b}x${s}.tgz" prof
if [[ $name != *H200* ]]; then
  for n in four eight; do
    rm -rf /tmp/ab-newa /tmp/ab-newb /tmp/ab-basea /tmp/ab-baseb  # no earlier A/B's JSON may pass for this one's
    SWEEP=0 PATCH=$R/exp2-one-in-$n.patch bash scripts/gluon_ab.sh >"$OUT/ab-$n.log" 2>&1
    echo "A/B one in $n exit $?"
    tail -n 30 "$OUT/ab-$n.log"
    mv "$OUT/ab.tar.gz" "$OUT/ab-$n.tar.gz"
  done
fi
ls -la "$OUT"
