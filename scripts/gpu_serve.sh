#!/usr/bin/env bash
# vLLM end to end on the SM90 host (project root). vLLM 0.26.0 travels in three parts (.vllm/, made by
# ../shared/gpu/vllm/pack.sh and re-split so that each part fits a call with what else that call carries);
# the host keeps /tmp only while it stays up, so the calls below must follow each other back to back.
#
#   bash scripts/gpu_serve.sh stage N    copy part N into /tmp/vllm-stage (carry .vllm/N, .vllm/MANIFEST, .vllm/stage.sh)
#   bash scripts/gpu_serve.sh checks     stage part 3, install vLLM, then: serving-path kernel tests and
#                                                 the end-to-end agreement tests (tests/serve); starts the engine gate
#                                                 in the background (setsid: it outlives the call)
#   bash scripts/gpu_serve.sh engine     wait for the engine gate (gates/engine.yaml), pack its report, the
#                                                 per-layout runs and the four-layout table
#   bash scripts/gpu_serve.sh accuracy   the accuracy gate through lm-eval's vllm backend (carry .whl7)
#   bash scripts/gpu_serve.sh recheck    stage part 3, the agreement tests again, and a profile of one
#                                                 batch-64 batch for bf16-inject and shared-k16v8
#   bash scripts/gpu_serve.sh long-prefill   (carry .vllm/setup.sh; vLLM installed and .gpu unpacked by earlier
#                                                 calls, e.g. vllm_halves.sh and gpu_speed.sh prefill) the agreement
#                                                 of prefills long enough for the Gluon prefill's persistent tiles
#                                                 (tests/serve/test_vllm_long_prefill.py), with the sha256 of the
#                                                 files it runs; exits with pytest's status
# Everything comes back in $OUT as a few files (logs, one tar.gz per step).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
step=${1:?usage: gpu_serve.sh stage N | checks | engine | accuracy | recheck | long-prefill}
WORK=/tmp/serve-work
mkdir -p "$WORK"
source scripts/gpu_lib.sh

case $step in
stage)
  bash .vllm/stage.sh "${2:?part number}"
  ;;
checks)
  {
    bash .vllm/stage.sh 3
    vllm_env || exit 1
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
    python3 -c 'from importlib.metadata import entry_points; print([e.value for e in entry_points(group="vllm.general_plugins")])'
    log "serving-path kernel tests"
    timeout 240 python3 -m pytest tests/kernels/test_serving_paths_gpu.py -q -rs -p no:cacheprovider
    log "exit $?"
    log "end-to-end agreement (inject vs shared, fresh process per layout)"
    QUALIFY_E2E_OUT=$WORK/e2e timeout 420 python3 -m pytest tests/serve/test_vllm_e2e.py -q -rs -p no:cacheprovider
    log "exit $?"
    log "engine gate: started in the background (collected by the 'engine' step)"
    sign=()
    qualify keygen --out "$WORK/keys" >/dev/null 2>&1 && sign=(--sign-key "$WORK/keys/signing-key.pem")
    QUALIFY_ENGINE_RUNS_DIR=$WORK/engine_runs setsid nohup python3 -c \
      'import sys; from qualify.cli import main; sys.exit(main())' run gates/engine.yaml --out "$WORK/engine" \
      --name engine --non-release "${sign[@]}" -- -v >"$WORK/engine.log" 2>&1 &
    echo $! >"$WORK/engine.pid"
  } 2>&1 | tee "$OUT/checks.log"
  tar -C "$WORK" -czf "$OUT/checks.tar.gz" --exclude=engine --exclude=engine_runs --exclude=engine.log . 2>/dev/null
  ;;
engine)
  vllm_env >/dev/null 2>&1
  wait_for "$WORK/engine.pid" "${ENGINE_WAIT_S:-560}" || echo "engine gate still running"
  tail -40 "$WORK/engine.log"
  qualify serve-summary "$WORK/engine_runs" --out "$WORK/engine_summary.json" | tee "$WORK/engine_summary.md"
  cp "$WORK/engine.log" "$WORK/engine_summary.md" "$OUT/" 2>/dev/null
  tar -C "$WORK" -czf "$OUT/engine.tar.gz" engine engine_runs engine_summary.json engine_summary.md keys/signing-key.pub.pem \
    2>/dev/null
  ;;
recheck)
  # A fresh machine: stage part 3 (parts 1 and 2 staged by the calls before), the end-to-end agreement tests, and a
  # profile of one batch-64 batch for the ordinary and the shared layout (scripts/profile_step.py).
  {
    bash .vllm/stage.sh 3
    vllm_env || exit 1
    log "end-to-end agreement (inject vs shared, fresh process per layout)"
    QUALIFY_E2E_OUT=$WORK/e2e timeout 300 python3 -m pytest tests/serve/test_vllm_e2e.py -q -rs -p no:cacheprovider
    log "exit $?"
    for lay in bf16-inject shared-k16v8; do
      log "profile $lay b64"
      timeout 150 python3 scripts/profile_step.py --layout "$lay" --batch 64 --out "$WORK/profile" 2>&1 \
        | grep -E "^(==|  host|  gpu)|Error|error"
    done
  } 2>&1 | tee "$OUT/recheck.log"
  tar -C "$WORK" -czf "$OUT/recheck.tar.gz" e2e profile 2>/dev/null
  ;;
long-prefill)
  rm -rf "$WORK/long"
  {
    vllm_env || exit 1
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
    sha256sum scripts/gpu_serve.sh qualify/cli.py qualify/serve/*.py fixtures/qwen3_small/config.json tests/conftest.py \
      tests/serve/_agreement_runs.py tests/serve/test_vllm_long_prefill.py \
      kernels/cartridge_attn/*.py > "$OUT/long-prefill-sha256.txt"
    log "end-to-end agreement of 8 x 1,024-token prefills (the persistent tiles) and the 48-token control"
    QUALIFY_E2E_OUT=$WORK/long timeout "${LONG_TIMEOUT:-480}" python3 -m pytest tests/serve/test_vllm_long_prefill.py \
      -q -rs -p no:cacheprovider
    rc=$?
    log "exit $rc"
    exit $rc
  } 2>&1 | tee "$OUT/long-prefill.log"
  rc=${PIPESTATUS[0]}
  tar -C "$WORK" -czf "$OUT/long-prefill.tar.gz" long 2>/dev/null || echo "no runs kept under $WORK/long"
  exit "$rc"
  ;;
accuracy)
  # Issue 7's pass-through (lm-eval's vllm backend), after the engine gate so that nothing shares the GPU with it.
  vllm_env >/dev/null 2>&1 || exit 1
  OUT=$WORK/accuracy TIMEOUT=${TIMEOUT:-300} bash scripts/gpu_vllm.sh
  echo "exit $?"
  tar -C "$WORK" -czf "$OUT/accuracy.tar.gz" accuracy 2>/dev/null
  ;;
*)
  echo "unknown step $step"; exit 2
  ;;
esac
