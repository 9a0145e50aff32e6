#!/usr/bin/env bash
# Issue 15 on the SM90 host (project root): qualify what ships. Steps, one call each, back to back (the host keeps
# /tmp only while it stays up):
#
#   bash scripts/gpu_ships.sh numerics   (carry .gpu)  kernel GPU tests; the numerics gate with the envelope and
#        GQA-group cells plus one kernel perf gate in ONE signed run (so its coverage table pairs what the perf
#        items dispatched with what numerics qualified; the numerics items' own durations give the gate's time)
#   bash scripts/gpu_ships.sh mutants    (carry .gpu/setup.sh, .vllm/1, .vllm/MANIFEST, .vllm/stage.sh)
#        `qualify mutants` over mutation/cartridge_attn.yaml, 8 at once, signed; stages vLLM part 1
#   bash scripts/gpu_ships.sh stage N    (carry .vllm/N, .vllm/MANIFEST, .vllm/stage.sh)
#   bash scripts/gpu_ships.sh engine     (carry .vllm/3, .vllm/MANIFEST, .vllm/stage.sh, .vllm/setup.sh)
#        the envelope numerics cells and one engine comparison in one signed run: the engine's coverage table
# Logs and reports come back under $OUT (a few files; one tar.gz per step).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
step=${1:?usage: gpu_ships.sh numerics | mutants | stage N | engine}
WORK=/tmp/ships-work
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
source scripts/gpu_lib.sh

case $step in
numerics)
  {
    source .gpu/setup.sh
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
    install; keys
    [[ ${SKIP_TESTS:-0} == 1 ]] || {
      log "kernel tests, compiled (gpu and kernel marks)"
      timeout 200 python3 -m pytest -q -m "gpu or kernel" -rs ${KERNEL_TESTS:-tests/kernels} -p no:cacheprovider -x 2>&1 |
        tail -n 6
    }
    rm -rf "$WORK/coverage"  # scratch: a rerun on a warm host replaces the last one
    log "numerics + perf-shared-vs-inject-fp8 in one run (coverage)"
    SECONDS=0
    timeout ${COVERAGE_TIMEOUT_S:-560} python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' run gates/kernel_numerics.yaml \
      gates/kernel_numerics_gluon.yaml gates/perf.yaml -k "numerics or perf-shared-vs-inject-fp8" --out "$WORK/coverage" --name coverage-perf-h200 \
      --sign-key "$WORK/keys/signing-key.pem" --non-release -- -q >"$WORK/coverage.log" 2>&1
    echo "exit $? wall ${SECONDS} s"
    tail -n 30 "$WORK/coverage.log"
  } 2>&1 | tee "$OUT/numerics.log"
  tar -C "$WORK" -czf "$OUT/numerics.tar.gz" coverage coverage.log keys/signing-key.pub.pem 2>/dev/null
  ;;
mutants)
  {
    stager=""
    if [[ -f .vllm/stage.sh && -e .vllm/1 ]]; then bash .vllm/stage.sh 1 >/dev/null 2>&1 & stager=$!; fi
    source .gpu/setup.sh >/dev/null
    install; keys
    rm -rf "$WORK/mutation"
    log "qualify mutants (8 at once)"
    timeout 520 python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' mutants \
      mutation/cartridge_attn.yaml --jobs 8 --timeout-s 420 --out "$WORK/mutation" --name mutation-h200 \
      --sign-key "$WORK/keys/signing-key.pem"
    echo "exit $?"
    [[ -z $stager ]] || { wait "$stager"; echo "vllm part 1 staged: exit $?"; }
  } 2>&1 | tee "$OUT/mutants.log"
  tar -C "$WORK" -czf "$OUT/mutation.tar.gz" mutation keys/signing-key.pub.pem 2>/dev/null
  ;;
stage)
  bash .vllm/stage.sh "${2:?part number}"
  ;;
engine)
  {
    bash .vllm/stage.sh 3 || exit 1
    vllm_env || exit 1
    keys
    rm -rf "$WORK/engine" "$WORK/engine_runs"
    log "numerics envelope cells + engine-shared-vs-inject (tokens/s) in one run (coverage)"
    QUALIFY_ENGINE_RUNS_DIR=$WORK/engine_runs timeout 540 python3 -c \
      'import sys; from qualify.cli import main; sys.exit(main())' run gates/kernel_numerics.yaml \
      gates/kernel_numerics_gluon.yaml gates/engine.yaml -k "numerics-envelope-decode or numerics-envelope-prefill or \
      gluon-envelope-p8 or (engine-shared-vs-inject and output_tokens)" \
      --out "$WORK/engine" --name coverage-engine-h200 --sign-key "$WORK/keys/signing-key.pem" --non-release -- -q \
      >"$WORK/engine.log" 2>&1
    echo "exit $?"
    tail -n 40 "$WORK/engine.log"
  } 2>&1 | tee "$OUT/engine.log"
  tar -C "$WORK" -czf "$OUT/engine.tar.gz" engine engine_runs engine.log keys/signing-key.pub.pem 2>/dev/null
  ;;
*)
  echo "unknown step $step"; exit 2
  ;;
esac
