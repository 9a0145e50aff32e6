#!/usr/bin/env bash
# One device call for the fused cartridge attention kernel: GPU tests, then the benchmark, then FlashInfer's
# JIT cache saved for the next call. Run from the project root on the SM90 host, with .gpu carried:
#   bash scripts/gpu_kernel.sh <git-commit> [--tune] [more bench_attention.py options]
# Writes under $OUT: nvidia-smi.txt, tests.log, bench.log, bench_results.json (sweep.json with --tune),
# jit-cache.tar.xz*, and with
# NCU=1 ncu.txt (Nsight Compute sections for the points that miss their targets).
set -uo pipefail
commit=${1:-unknown}
shift || true
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source .gpu/setup.sh
# vLLM for the FA3 baseline (fa3-shared-pages-bf16): parts 1 and 2 staged by earlier calls (gpu_graphs.sh stage N),
# part 3 carried with this one; without it that baseline's rows fail with the reason. The whole .gpu and a vLLM part
# pass the 64 MiB carry limit together: carry the whole .gpu in a first call (FlashInfer is unpacked into /tmp), then
# only .gpu/setup.sh and .gpu/save-cache.sh with the part.
source scripts/gpu_lib.sh
vllm_if_staged
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/nvidia-smi.txt"
if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  timeout "${TEST_TIMEOUT:-240}" python3 -m pytest tests/kernels -q -rs -n 8 -p no:cacheprovider >"$OUT/tests.log" 2>&1
  echo "pytest exit: $?" >>"$OUT/tests.log"
  tail -n 25 "$OUT/tests.log"
fi
timeout "${BENCH_TIMEOUT:-420}" python3 scripts/bench_attention.py --out "$OUT" --commit "$commit" "$@" \
  2>&1 | tee "$OUT/bench.log" | grep -v '^ ' || true
if [[ ${NCU:-0} == 1 ]]; then
  # Hardware counters for the points that miss their targets (one launch each, clocks left alone).
  for a in "--batch 1 --live 128" "--batch 16 --live 128" "--kind prefill --batch 16 --live 512"; do
    echo "=== profile_decode.py $a"
    timeout 100 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:cartridge_attn --launch-skip 3 \
      --launch-count 1 python3 scripts/profile_decode.py $a
  done >"$OUT/ncu.txt" 2>&1
  grep -E "^===|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Compute \(SM\)" \
    "$OUT/ncu.txt" || true
fi
bash .gpu/save-cache.sh >/dev/null 2>&1 || true
