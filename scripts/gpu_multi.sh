#!/usr/bin/env bash
# Issue 20 on a GPU host (project root, .gpu carried or set up by an earlier call):
#
#   bash scripts/gpu_multi.sh spread
#        the same gate files and selection run serially and with `qualify run --gpus $GPUS` (default auto: one
#        pytest-xdist worker per GPU), both signed; then scripts/compare_runs.py: the same verdict, counts and
#        item statuses, the wall-time ratio, and the GPU that ran each item. WARM=1 first runs the selection once
#        unrecorded, so that neither timed run pays Triton's compiles (on a one-GPU host this checks agreement
#        only: the ratio there is about the scheduling overhead).
#        GATES (default: both numerics files, so that K may select either prefill's cells), K (a -k selection;
#        default: the Qwen3-8B decode envelope and the hand-written cells), GPUS, TIMEOUT (per run, default 240 s).
# Everything comes back under $OUT: each run's log and report, compare.json, and the public key.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
step=${1:?usage: gpu_multi.sh spread}
WORK=/tmp/multi-work
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
source scripts/gpu_lib.sh
GATES=${GATES:-gates/kernel_numerics.yaml gates/kernel_numerics_gluon.yaml}
K=${K:-numerics-original or numerics-envelope-decode or numerics-envelope-p16-decode}
GPUS=${GPUS:-auto}
limit=${TIMEOUT:-240}

# signed NAME [qualify run options...]: one signed run of the selection into $WORK/NAME (gpu_lib.sh's signed_run)
signed() {
  local name=$1
  shift
  # shellcheck disable=SC2086  # GATES is a list of files
  signed_run "$name" "$name" "$limit" $GATES -k "$K" "$@"
}

case $step in
spread)
  {
    source .gpu/setup.sh >/dev/null 2>&1
    install; keys
    nvidia-smi -L
    python3 -c 'import xdist, execnet; print("pytest-xdist", xdist.__version__, "execnet", execnet.__version__)'
    rm -rf "$WORK"/serial* "$WORK"/spread* "$WORK"/warm*
    [[ ${WARM:-0} == 1 ]] && signed warm
    log "serial"
    signed serial
    log "--gpus $GPUS"
    signed spread --gpus "$GPUS"
    tail -n 6 "$WORK/serial.log" "$WORK/spread.log"
    python3 scripts/compare_runs.py "$WORK/serial/serial.json" "$WORK/spread/spread.json" --json "$WORK/compare.json"
    echo "compare exit $?" >"$WORK/compare.rc"
  } 2>&1 | tee "$OUT/step.log"
  tar -C "$WORK" -czf "$OUT/spread.tar.gz" serial serial.log spread spread.log compare.json keys/signing-key.pub.pem \
    2>/dev/null
  # The step's exit status is the comparison's: 1 when the runs disagree, 2 when a report is missing or unreadable.
  rc=$(sed -n 's/^compare exit //p' "$WORK/compare.rc" 2>/dev/null)
  exit "${rc:-2}"
  ;;
*)
  echo "unknown step $step"
  exit 2
  ;;
esac
