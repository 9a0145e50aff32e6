#!/usr/bin/env bash
# Issue 16 on the SM90 host (project root): the shared path in vLLM's default mode (torch.compile + CUDA graphs)
# against prefix-cached serving. Calls back to back (the host keeps /tmp only while it stays up):
#
#   bash scripts/gpu_graphs.sh kernels   (carry .gpu)  the kernel's GPU tests (CUDA-graph replay of a plan over
#        persistent buffers, padded decode, block-table planning) and the Qwen3-8B numerics envelope cells, signed
#        (also fills the Triton cache the engine run's numerics cells reuse)
#   bash scripts/gpu_graphs.sh sign      (carry .gpu/wheels)  cryptography for signing, when no `kernels` call ran
#   bash scripts/gpu_graphs.sh stage N   (carry .vllm/N, .vllm/MANIFEST, .vllm/stage.sh)   N = 1, 2
#   bash scripts/gpu_graphs.sh checks    (carry .vllm/3, .vllm/MANIFEST, .vllm/stage.sh, .vllm/setup.sh)
#        stage part 3, install vLLM; the glue check against vLLM's classes and the direct-launch tests (compiled
#        kernel); the agreement tests
#        in graph mode (tests/serve/test_vllm_e2e.py; AGREEMENT=0 leaves them out); then, in the background, ONE signed run of the numerics
#        envelope cells and gates/engine.yaml (3 processes per layout), so that its coverage table pairs every
#        variant the engines dispatched with the cells that qualified it (ENGINE_GATES: other engine gate files,
#        e.g. "gates/engine.yaml gates/engine_concurrency.yaml"; ENGINE_K: which of their items, default "engine-")
#        BACKGROUND=profiles starts the profiles of the PROFILE layouts instead (step `profiles`), and
#   bash scripts/gpu_graphs.sh collect   waits for them (COLLECT_WAIT_S) and brings back their files and table
#   bash scripts/gpu_graphs.sh hotpath   (after stage 1, 2; carry .vllm/3 ... and REF_DIR) the once-checked hot path
#        on the GPU: glue, kernel tests, host cost per layer, one agreement run against earlier records, and (DIRECT=1,
#        the default) the same run with direct launches against it
#   bash scripts/gpu_graphs.sh engine    wait for that run (ENGINE_WAIT_S), then the layout table and the run's
#        files; with PROFILE="layout ...", profiles of those layouts after the run (PROFILE_ARGS, default
#        "--batch 64"; "--batch 1 --gen 1" profiles the prefill step alone, i.e. the time to the first token). A call that ends
#        before the run does brings back the worker results so far (the last call may run out of device time)
# Everything comes back under $OUT (logs, one tar.gz per step).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
step=${1:?usage: gpu_graphs.sh kernels | stage N | checks | engine}
WORK=/tmp/graphs-work
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
source scripts/gpu_lib.sh
# The Qwen3-8B envelope cells of both prefills: the dispatch's on SM90 with Triton 3.6 is the Gluon one.
ENVELOPE="numerics-envelope-decode or numerics-envelope-prefill or gluon-envelope-p8"
NUMERICS_GATES="gates/kernel_numerics.yaml gates/kernel_numerics_gluon.yaml"

case $step in
kernels)
  {
    source .gpu/setup.sh
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
    install; keys
    log "kernel GPU tests: graph replay, padded decode, block-table planning, the kernel's own"
    timeout 240 python3 -m pytest -q -m "gpu or kernel" -rs -p no:cacheprovider tests/kernels/test_serving_paths_gpu.py \
      tests/kernels/test_plan_block_table.py tests/kernels/test_cartridge_attn_gpu.py 2>&1 | tail -n 8
    log "numerics envelope cells (Qwen3-8B attention), signed"
    rm -rf "$WORK/numerics"
    SECONDS=0
    # shellcheck disable=SC2086  # NUMERICS_GATES is a list of files
    timeout ${NUMERICS_TIMEOUT_S:-300} python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' run \
      $NUMERICS_GATES -k "$ENVELOPE" --out "$WORK/numerics" --name numerics-envelope-h200 \
      --sign-key "$WORK/keys/signing-key.pem" --non-release -- -q >"$WORK/numerics.log" 2>&1
    echo "exit $? wall ${SECONDS} s"
    tail -n 12 "$WORK/numerics.log"
  } 2>&1 | tee "$OUT/kernels.log"
  tar -C "$WORK" -czf "$OUT/kernels.tar.gz" numerics numerics.log keys/signing-key.pub.pem 2>/dev/null
  ;;
sign)
  sign_site && ls -d /tmp/sign-site/cryptography
  ;;
stage)
  bash .vllm/stage.sh "${2:?part number}"
  ;;
checks)
  {
    bash .vllm/stage.sh 3 || exit 1
    vllm_env || exit 1
    keys
    log "glue check against vLLM's classes (compiled kernel); the kernel's CUDA-graph replay test"
    timeout 240 python3 -m pytest -q -rs -p no:cacheprovider tests/serve/test_vllm_glue.py \
      tests/kernels/test_serving_paths_gpu.py -k "glue or cuda_graph" 2>&1 | tail -n 40
    log "direct launches on the compiled kernel (cartridge_attn.launch)"
    timeout 120 python3 -m pytest -q -rs -p no:cacheprovider tests/kernels/test_direct_launch.py 2>&1 | tail -n 6
    if [[ ${AGREEMENT:-1} == 1 ]]; then
      log "agreement in graph mode: prefix-cached reference, injection, shared K16/V16, K16/V8, K16/V8 live pages"
      SECONDS=0
      QUALIFY_E2E_OUT=$WORK/e2e timeout ${E2E_TIMEOUT_S:-400} python3 -m pytest tests/serve/test_vllm_e2e.py -q \
        -rs -p no:cacheprovider 2>&1 | tail -n 25
      echo "agreement wall ${SECONDS} s"
    fi
    if [[ ${BACKGROUND:-engine} == profiles ]]; then
      log "profiles of ${PROFILE:?PROFILE names the layouts}: started in the background (collected by 'collect')"
      rm -rf "$WORK/profile"
      setsid nohup bash scripts/gpu_graphs.sh profiles >"$WORK/profiles.log" 2>&1 &
      echo $! >"$WORK/engine.pid"
      exit 0
    fi
    log "numerics envelope + engine gate: started in the background (collected by the 'engine' step)"
    rm -rf "$WORK/engine" "$WORK/engine_runs"
    # shellcheck disable=SC2086  # NUMERICS_GATES is a list of files
    QUALIFY_ENGINE_RUNS_DIR=$WORK/engine_runs setsid nohup python3 -c \
      'import sys; from qualify.cli import main; sys.exit(main())' run $NUMERICS_GATES \
      ${ENGINE_GATES:-gates/engine.yaml} -k "$ENVELOPE or ${ENGINE_K:-engine-}" --out "$WORK/engine" \
      --name engine-graphs-h200 --non-release --sign-key "$WORK/keys/signing-key.pem" -- -v >"$WORK/engine.log" 2>&1 &
    echo $! >"$WORK/engine.pid"
  } 2>&1 | tee "$OUT/checks.log"
  tar -C "$WORK" -czf "$OUT/checks.tar.gz" e2e 2>/dev/null
  ;;
engine)
  vllm_env >/dev/null 2>&1
  if ! wait_for "$WORK/engine.pid" "${ENGINE_WAIT_S:-560}"; then
    echo "engine run still running: $(ls "$WORK/engine_runs" 2>/dev/null | tr '\n' ' ')"
    grep -E "PASSED|FAILED|SKIPPED|ERROR" "$WORK/engine.log" | tail -n 5
    tar -C "$WORK" -czf "$OUT/engine-partial.tar.gz" engine_runs engine.log 2>/dev/null
    exit 0
  fi
  tail -n 45 "$WORK/engine.log"
  qualify serve-summary "$WORK/engine_runs" --out "$WORK/engine_summary.json" | tee "$WORK/engine_summary.md"
  for lay in ${PROFILE:-}; do
    log "profile $lay ${PROFILE_ARGS:=--batch 64} (graph mode)"
    # shellcheck disable=SC2086  # PROFILE_ARGS is a list of arguments
    timeout 150 python3 scripts/profile_step.py --layout "$lay" $PROFILE_ARGS --out "$WORK/profile" 2>&1 |
      grep -E "^(==|  host|  gpu)|Error|error"
  done
  tar -C "$WORK" -czf "$OUT/engine.tar.gz" engine engine_runs engine.log engine_summary.json engine_summary.md \
    profile keys/signing-key.pub.pem 2>/dev/null
  ;;
profiles)
  # Started in the background by `checks` with BACKGROUND=profiles: one engine per layout of PROFILE, every point of
  # PROFILE_ARGS in it (scripts/profile_step.py), then one table over all of them.
  vllm_env >/dev/null 2>&1 || exit 1
  for lay in ${PROFILE:?}; do
    log "profile $lay ${PROFILE_ARGS:=--batch 1 16 64 --ttft} (graph mode)"
    # shellcheck disable=SC2086  # PROFILE_ARGS is a list of arguments
    timeout "${PROFILE_TIMEOUT_S:-360}" python3 scripts/profile_step.py --layout "$lay" $PROFILE_ARGS \
      --out "$WORK/profile" 2>&1 | grep -E "^(==|  host|  gpu)|Error|error"
  done
  python3 scripts/profile_step.py --summarize "$WORK/profile" | tee "$WORK/profile_summary.md"
  ;;
collect)
  # Wait for the background profiles (COLLECT_WAIT_S), then their table; a call that ends first brings back the
  # profiles so far.
  wait_for "$WORK/engine.pid" "${COLLECT_WAIT_S:-560}" || echo "profiles still running"
  tail -n 80 "$WORK/profiles.log"
  tar -C "$WORK" -czf "$OUT/profiles.tar.gz" profile profiles.log profile_summary.md 2>/dev/null
  ;;
hotpath)
  # After `stage 1`, `stage 2` (carry .vllm/3, .vllm/MANIFEST, .vllm/stage.sh, .vllm/setup.sh and REF_DIR): the
  # backend's once-checked hot path on the GPU: the glue check and the kernel's CUDA-graph replay, the layer-operand
  # and cache-write tests compiled, the host cost per layer of each path (scripts/host_overhead.py), one graph-mode
  # agreement run of the K16/V8 live-page layout with Triton's JIT launches compared with the prefix-cached reference
  # and with the same layout's record from before the change (REF_DIR: records of an earlier `checks` call), and
  # (DIRECT=1) the same run with direct launches (the default) against it, token for token.
  {
    bash .vllm/stage.sh 3 || exit 1
    vllm_env >/dev/null || exit 1
    log "glue check and CUDA-graph replay (compiled kernel)"
    timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/serve/test_vllm_glue.py \
      tests/kernels/test_serving_paths_gpu.py -k "glue or cuda_graph" 2>&1 | tail -n 6
    log "layer operands and cache writes (compiled kernel)"
    timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/kernels/test_layer_operands.py \
      tests/kernels/test_cache_write.py tests/kernels/test_direct_launch.py 2>&1 | tail -n 6
    log "host cost per layer: prefill of 64 tokens, then a one-token decode"
    timeout 90 python3 scripts/host_overhead.py --out "$OUT/host_overhead_q64.json"
    timeout 60 python3 scripts/host_overhead.py --queries 1 --out "$OUT/host_overhead_q1.json"
    log "agreement in graph mode: shared-k16v8-live-fp8"
    lay=shared-k16v8-live-fp8
    timeout 200 python3 -m qualify.cli serve-agreement generate --layout $lay --kernel-launch triton \
      --out "$OUT/$lay.json" 2>&1 | tail -n 3
    brief='import json, sys; d = json.load(open(sys.argv[1])); t, lp = d["token_identity"], d["logprobs"]
print("passed", d["passed"], "tokens compared", t["compared_tokens"], "log-prob diff mean", lp["mean_abs_diff"],
      "max", lp["max_abs_diff"])'
    qualify serve-agreement compare "${REF_DIR:?}/bf16-prefix-cached.json" "$OUT/$lay.json" --logprob-tolerance 0.1 \
      >"$OUT/compare-reference.json"
    python3 -c "$brief" "$OUT/compare-reference.json"
    log "against the same layout before the change (token identity, exact)"
    qualify serve-agreement compare "$REF_DIR/$lay.json" "$OUT/$lay.json" --tie-eps 0 >"$OUT/compare-before.json"
    python3 -c "$brief" "$OUT/compare-before.json"
    if [[ ${DIRECT:-1} == 1 ]]; then
      log "the same layout with direct launches (cartridge_attn.launch), against the JIT-launched record (exact)"
      timeout 200 python3 -m qualify.cli serve-agreement generate --layout $lay --kernel-launch direct \
        --out "$OUT/$lay-direct.json" 2>&1 | tail -n 3
      qualify serve-agreement compare "$OUT/$lay.json" "$OUT/$lay-direct.json" --tie-eps 0 >"$OUT/compare-direct.json"
      python3 -c "$brief" "$OUT/compare-direct.json"
      python3 -c 'import json, sys; print("direct launches seen:", json.load(open(sys.argv[1]))["fused_direct_launches"])' \
        "$OUT/$lay-direct.json"
    fi
  } 2>&1 | tee "$OUT/hotpath.log"
  ;;
*)
  echo "unknown step $step"; exit 2
  ;;
esac
