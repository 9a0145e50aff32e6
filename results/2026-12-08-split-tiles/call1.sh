#!/usr/bin/env bash
# Device call 1 of this record, on an SM90 host from the project root (carry .gpu): the split decode in whole tiles.
# The split-decode mutants against gates/kernel_numerics.yaml (signed, the unmutated copy on their killing items)
# beside the Triton kernel's GPU tests, then Nsight Compute's DRAM bytes of one decode launch at (16, 1024) and
# (1, 1024), the perf gate's page-8 shape, whose split boundaries fell inside live tiles before.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
WORK=/tmp/speed-work
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
source scripts/gpu_lib.sh
MUTANTS=split-ranges-overlap,split-partial-cartridge-tile-dropped,split-combine-equal-weights,split-counter-not-rearmed
MUTANTS=$MUTANTS,split-combines-before-the-last-arrival,cascade-state-in-every-split
{
  source .gpu/setup.sh >/dev/null 2>&1
  install; keys
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  git ls-files -z | xargs -0 sha256sum >"$OUT/tree-sha256.txt" 2>/dev/null
  sha256sum kernels/cartridge_attn/_kernel.py mutation/cartridge_attn.yaml gates/kernel_numerics.yaml
  rm -rf "$WORK/split-mutation"
  log "split-decode mutants (signed) beside the Triton kernel's GPU tests"
  SECONDS=0
  timeout 420 python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' mutants \
    mutation/cartridge_attn.yaml --only "$MUTANTS" --jobs "$(mutant_jobs)" --timeout-s 240 --unmutated killing-items \
    --out "$WORK/split-mutation" --name split-mutation --sign-key "$WORK/keys/signing-key.pem" \
    >"$WORK/split-mutation.log" 2>&1 &
  mutants=$!
  timeout 300 python3 -m pytest tests/kernels/test_cartridge_attn_interpreter.py tests/kernels/test_cartridge_attn_gpu.py \
    -q -rs -n 4 -p no:cacheprovider >"$OUT/kernel-tests.log" 2>&1
  echo "kernel tests exit $? after ${SECONDS} s"
  grep -E "passed|failed|^FAILED|^ERROR" "$OUT/kernel-tests.log" | tail -n 8
  wait "$mutants"
  echo "mutants exit $? after ${SECONDS} s"
  grep -E "survived|killed|broken|inconclusive|verdict|unmutated|score" "$WORK/split-mutation.log" | tail -n 14
  for b in 16 1; do
    log "Nsight Compute: DRAM bytes of the fused K16/V8 decode at ($b, 1024)"
    timeout 90 ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      -k regex:cartridge_attn --launch-skip 3 --launch-count 1 \
      python3 scripts/profile_decode.py --batch "$b" --live 1024 --implementation fused-k16v8 >"$OUT/ncu-b$b.txt" 2>&1
    echo "ncu exit $?"
    grep -E "cartridge_attn|dram__|gpu__time" "$OUT/ncu-b$b.txt" | head -n 6
  done
} 2>&1 | tee "$OUT/call1.log"
tar -C "$WORK" -czf "$OUT/split-mutation.tar.gz" split-mutation split-mutation.log keys/signing-key.pub.pem 2>/dev/null
