#!/usr/bin/env bash
# Issue 17 on the SM90 host (project root), one step per device call, back to back (the host keeps /tmp only while
# it stays up, ~30 s after a call):
#
#   bash scripts/gpu_speed.sh sweep <commit>     (carry .gpu)  the kernel's GPU tests, then the decode and prefill
#        configuration sweeps (bench_attention.py --tune --sweep-only): what the dispatch table is chosen from
#   CANDIDATES="1,128,4,2,2 ..." bash scripts/gpu_speed.sh cascade <commit>   (carry .gpu) the decode cascade's GPU
#        tests, then a decode sweep (BATCHES, default 1 16 64) of the given candidates (R,BN,W,S,K[,CR,CS[,P]]; K or CS 0
#        for the default, CR 0 for no cascade, no CR for the dispatch's choice, P 0 for a serial live walk) with a table of per-layer times;
#        SHAPE names bench_attention.py's shape (qwen3-8b, page 8, by default; p16 for page 16)
#   bash scripts/gpu_speed.sh cascade-qualify    (carry .gpu) the decode cascade's numerics gates (numerics-cascade-*,
#        signed) and its mutants against those gates alone (signed), side by side
#   bash scripts/gpu_speed.sh cascade-perf       (carry as for `targets`; vLLM staged by earlier calls)
#        gates/gpu/perf_cascade.yaml (the cascade against the fused decode and FA3 over shared pages) with the
#        cascade's numerics cells in one signed run, so its coverage pairs what was timed with what was qualified
#   bash scripts/gpu_speed.sh shapes <commit>    (carry .gpu/setup.sh, .vllm/1, .vllm/MANIFEST, .vllm/stage.sh)
#        stages vLLM part 1; the measurement record's other shapes (page 16, head_dim 64, a GQA group of 3) with the
#        L2 cold, and the Qwen3-8B shape with the L2 warm, fused K16/V8 beside FlashInfer over shared pages
#   bash scripts/gpu_speed.sh qualify            (carry .gpu/setup.sh, .vllm/2, .vllm/MANIFEST, .vllm/stage.sh; or only
#        .gpu) stages vLLM part 2 when carried; the default numerics gates (gates/kernel_numerics.yaml and
#        gates/kernel_numerics_gluon.yaml, both prefills, in one signed run) and `qualify mutants` of the Triton kernel
#        (JOBS at once; beside the numerics run by default gpu_lib.sh's mutant_jobs, 8 on an H200 and 4 on an H100,
#        alone 8; signed) side by side: correctness items only, so sharing the GPU changes no check's outcome (an
#        item it runs out of memory is inconclusive, never a pass or a kill); MUTANTS=0 leaves out the mutation run,
#        MUTANTS=only runs it alone (the gate grew past what fits beside it in one call's 600 s); the numerics items
#        run on every GPU (GPUS, default auto) with 4 workers each (WORKERS_PER_GPU; 819 items took 188 s on one
#        H100); UNMUTATED=killing-items runs the mutants' unmutated copy after them on their killing items only (694
#        items took 405 s alone on an H100)
#   K="numerics-envelope-decode or ..." bash scripts/gpu_speed.sh numerics-part   (carry .gpu) the numerics gate's
#        items that K selects, in one signed run (INCOMPLETE by design: the rest is deselected)
#   bash scripts/gpu_speed.sh targets            (carry .gpu/setup.sh, .vllm/3, .vllm/MANIFEST, .vllm/stage.sh,
#        .vllm/setup.sh) stages vLLM part 3; gates/gpu/perf_targets.yaml with the numerics envelope cells in one
#        signed run, so its coverage table pairs what the timed items dispatched with what numerics qualified
#   bash scripts/gpu_speed.sh prefill            (carry .gpu/setup.sh, .vllm/setup.sh; vLLM staged by `targets`)
#        gates/perf.yaml's shared-page items (FA3 and FlashInfer, decode and TTFT proxy) with the numerics envelope
#        cells of their shape in one signed run
#   bash scripts/gpu_speed.sh counters           (carry .gpu/setup.sh, .vllm/3, .vllm/MANIFEST, .vllm/stage.sh,
#        .vllm/setup.sh; .gpu set up and vLLM parts 1-2 staged by earlier calls) stages vLLM part 3;
#        gates/perf.yaml's FA3 shared-page item with Nsight Compute counters of both sides, beside the numerics
#        envelope cells of its shape, in one signed run
#   bash scripts/gpu_speed.sh gluon              (carry .gpu) the Gluon prefill (issue 17 item 2): one launch per
#        smoke variant (scripts/gluon_smoke.py, each under a timeout), with GLUON_TESTS=1 its GPU tests (=all: every
#        kernel test; GLUON_OFFLINE=1 adds its offline builds), with GLUON_HOST=1 the host time per layer of both
#        prefills (scripts/host_overhead.py), then gates/kernel_numerics_gluon.yaml with the Triton kernel's
#        padding-key cells (signed) and `qualify mutants mutation/cartridge_attn_gluon.yaml` (signed) side by side,
#        only if everything before passed (GLUON_GATES=0 stops before them; GLUON_SMOKE=0 skips the smoke)
#   bash scripts/gpu_speed.sh requalify-gluon    (carry .gpu) after a change to the Gluon prefill's dispatch: its GPU
#        tests and the dispatch's, then the default numerics gates (both files, signed, GPUS x WORKERS_PER_GPU workers)
#        and `qualify mutants mutation/cartridge_attn_gluon.yaml` (signed) side by side
#   bash scripts/gpu_speed.sh gluon-bench COMMIT (carry .gpu) prefill per layer of the Triton and Gluon kernels
#        beside FlashInfer's FA3 over shared pages (bench_attention.py, L2 cold, CUDA graphs); GLUON_SWEEP=1 then
#        sweeps the Gluon prefill's tile shapes and ring depths (bench_attention.py --tune --prefill-impls gluon)
#   bash scripts/gpu_speed.sh gluon-profile COMMIT (carry .gpu) prefill per layer of the Gluon prefill with FP8 and BF16
#        cartridge V beside the Triton prefill and FA3, then Nsight Compute of each Gluon variant and of FA3 at one
#        point (PROFILE_B, PROFILE_S: batch 16, suffix 512 by default), the Gluon ones with per-SASS-line stalls
#   bash scripts/gpu_speed.sh gluon-perf         (carry .gpu/setup.sh, .vllm/3, .vllm/MANIFEST, .vllm/stage.sh,
#        .vllm/setup.sh; .gpu set up and vLLM parts 1-2 staged by earlier calls) stages vLLM part 3;
#        gates/gpu/perf_gluon.yaml (against FA3 over shared pages and the Triton prefill) with the numerics
#        envelope cells of its shape, the Gluon prefill's and the Triton prefill's (both are timed), in one signed run
# Everything comes back under $OUT (a log per step and one tar.gz of the reports).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
step=${1:?usage: gpu_speed.sh sweep|shapes|gluon-bench|gluon-profile|cascade COMMIT, or qualify|numerics-part|targets|prefill|counters|gluon|requalify-gluon|gluon-perf|cascade-qualify|cascade-perf}
commit=${2:-unknown}
WORK=/tmp/speed-work
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
source scripts/gpu_lib.sh
gpu() { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv; }

# signed_gate_run DIR NAME TIMEOUT TITLE K GATE_FILE...: one signed `qualify run` of the gate files with -k K under
# $WORK/DIR (vLLM from its staged parts when .vllm/setup.sh came with the call: vllm_if_staged stages a carried last
# part itself); its log, report and the public key come back in $OUT/DIR.tar.gz.
signed_gate_run() {
  local dir=$1 name=$2 limit=$3 title=$4 items=$5
  shift 5
  {
    source .gpu/setup.sh >/dev/null 2>&1
    vllm_if_staged
    install; keys
    gpu
    rm -rf "${WORK:?}/$dir"
    log "$title"
    signed_run "$dir" "$name" "$limit" "$@" -k "$items"
    tail -n 40 "$WORK/$dir.log"
  } 2>&1 | tee "$OUT/step.log"
  tar -C "$WORK" -czf "$OUT/$dir.tar.gz" "$dir" "$dir.log" keys/signing-key.pub.pem 2>/dev/null
}

case $step in
sweep)
  {
    source .gpu/setup.sh
    gpu
    log "kernel GPU tests"
    timeout "${TEST_TIMEOUT:-240}" python3 -m pytest tests/kernels -q -rs -n 12 -p no:cacheprovider >"$OUT/tests.log" 2>&1
    echo "pytest exit $?"
    grep -E "passed|failed|^FAILED|^ERROR" "$OUT/tests.log" | tail -n 12
    log "configuration sweeps"
    timeout "${SWEEP_TIMEOUT:-330}" python3 scripts/bench_attention.py --out "$OUT" --commit "$commit" --tune \
      --sweep-only >"$OUT/sweep.log" 2>&1
    echo "sweep exit $?"
  } 2>&1 | tee "$OUT/step.log"
  ;;
cascade)
  {
    source .gpu/setup.sh
    gpu
    log "kernel GPU tests: the decode cascade and the fused kernel's small shapes"
    timeout "${TEST_TIMEOUT:-240}" python3 -m pytest tests/kernels/test_cartridge_attn_gpu.py \
      tests/kernels/test_cartridge_attn_interpreter.py tests/kernels/test_serving_paths_gpu.py \
      tests/kernels/test_direct_launch.py -q -rs -n 8 -p no:cacheprovider -k "${TESTS_K:-cascade or decode or graph}" \
      >"$OUT/tests.log" 2>&1
    echo "pytest exit $?"
    grep -E "passed|failed|^FAILED|^ERROR" "$OUT/tests.log" | tail -n 12
    log "decode sweep: the defaults beside cascades (R,BN,W,S,K,CR,CS,P)"
    # shellcheck disable=SC2086
    timeout "${SWEEP_TIMEOUT:-330}" python3 scripts/bench_attention.py --out "$OUT" --commit "$commit" --tune \
      --sweep-only --only decode --shapes "${SHAPE:-qwen3-8b}" --batches ${BATCHES:-1 16 64} \
      --decode-candidates ${CANDIDATES:?} >"$OUT/sweep.log" 2>&1
    echo "sweep exit $?"
    python3 - "$OUT/sweep.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["sweep"]
for r in rows:
    c = r["config"]
    tag = f"r{c['reqs_per_program']}n{c['block_n']}w{c['num_warps']}s{c['num_stages']}k{c['splits']}c{c['cart_rows']}x{c['cart_splits']}{'p' if c.get('cart_pdl') else ''}"
    print(f"{r['batch']:>3} {r['tokens']:>5} {tag:<24} {r.get('per_layer_us', r.get('error', ''))!s:.60}")
PY
  } 2>&1 | tee "$OUT/step.log"
  ;;
cascade-qualify)
  {
    source .gpu/setup.sh >/dev/null 2>&1
    install; keys
    gpu
    rm -rf "$WORK/cascade-numerics" "$WORK/cascade-mutation"
    log "the cascade's numerics gates and its mutants (against those gates alone), side by side"
    signed_run cascade-numerics numerics-cascade-h200 "${CASCADE_TIMEOUT:-300}" gates/kernel_numerics.yaml \
      -k numerics-cascade &
    numerics=$!
    python3 - "$WORK/cascade-gate.yaml" <<'PY'
import sys, yaml
doc = yaml.safe_load(open("gates/kernel_numerics.yaml"))
doc["gates"] = [g for g in doc["gates"] if g["id"].startswith("numerics-cascade")]
doc["suite"] = doc["suite"] + "-cascade"
yaml.safe_dump(doc, open(sys.argv[1], "w"), sort_keys=False)
PY
    ids=$(python3 -c 'import yaml; print(",".join(m["id"] for m in yaml.safe_load(open("mutation/cartridge_attn.yaml"))["mutants"] if m["id"].startswith("cascade-")))')
    SECONDS=0
    timeout "${CASCADE_TIMEOUT:-300}" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' mutants \
      mutation/cartridge_attn.yaml --gate "$WORK/cascade-gate.yaml" --only "$ids" --jobs 7 --timeout-s 280 \
      --out "$WORK/cascade-mutation" --name mutation-cascade-h200 --sign-key "$WORK/keys/signing-key.pem" \
      >"$WORK/cascade-mutation.log" 2>&1
    echo "mutation-cascade-h200: exit $? after ${SECONDS} s"
    wait $numerics
    tail -n 12 "$WORK/cascade-numerics.log"
    tail -n 14 "$WORK/cascade-mutation.log"
  } 2>&1 | tee "$OUT/qualify-step.log"
  tar -C "$WORK" -czf "$OUT/cascade-qualify.tar.gz" cascade-numerics cascade-numerics.log cascade-mutation \
    cascade-mutation.log cascade-gate.yaml keys/signing-key.pub.pem 2>/dev/null
  ;;
shapes)
  {
    bash .vllm/stage.sh 1
    source .gpu/setup.sh >/dev/null 2>&1
    gpu
    impls="fused-k16v8 flashinfer-shared-pages-bf16"
    log "shapes p16 d64 g3, L2 cold"
    timeout 240 python3 scripts/bench_attention.py --out "$WORK/shapes-cold" --commit "$commit" --shapes p16 d64 g3 \
      --implementations $impls --repetitions 20 >"$OUT/shapes-cold.log" 2>&1
    echo "exit $?"
    log "qwen3-8b, L2 warm"
    timeout 120 python3 scripts/bench_attention.py --out "$WORK/shapes-warm" --commit "$commit" --shapes qwen3-8b \
      --l2 warm --implementations $impls --repetitions 20 >"$OUT/shapes-warm.log" 2>&1
    echo "exit $?"
    grep -v '^ ' "$OUT/shapes-cold.log" "$OUT/shapes-warm.log" | grep "|" | tail -n 60
  } 2>&1 | tee "$OUT/step.log"
  tar -C "$WORK" -czf "$OUT/shapes.tar.gz" shapes-cold shapes-warm 2>/dev/null
  ;;
qualify)
  {
    [ -d .vllm/2 ] && bash .vllm/stage.sh 2
    source .gpu/setup.sh >/dev/null 2>&1
    install; keys
    gpu
    rm -rf "$WORK/numerics" "$WORK/mutation"
    log "numerics gate and mutants, side by side"
    numerics=""
    if [ "${MUTANTS:-1}" != only ]; then
      # shellcheck disable=SC2086
      # 819 items: 188 s with 4 workers on one H100 (2026-12-06), past 560 s serially; the workers share the GPU only
      # because these are correctness items (WORKERS_PER_GPU=1 runs them one at a time).
      signed_run numerics numerics-h200 "${NUMERICS_LIMIT:-560}" gates/kernel_numerics.yaml \
        gates/kernel_numerics_gluon.yaml --gpus "${GPUS:-auto}" --workers-per-gpu "${WORKERS_PER_GPU:-4}" &
      numerics=$!
    fi
    if [ "${MUTANTS:-1}" != 0 ]; then
      # Each child runs the whole gate at worst (the unmutated copy always does): 596 items took 531 s beside the
      # numerics run on the H200 (2026-12-06), past a 420 s child limit; alone (MUTANTS=only) they fit 540 s.
      jobs=$(mutant_jobs)
      [ "${MUTANTS:-1}" = only ] && jobs=${JOBS:-8}  # nothing beside them
      signed_mutants mutation mutation-h200 580 "$jobs" "${EACH_S:-540}" mutation/cartridge_attn.yaml
    fi
    wait $numerics
    [ -n "$numerics" ] && tail -n 25 "$WORK/numerics.log"
    [ "${MUTANTS:-1}" != 0 ] && tail -n 8 "$WORK/mutation.log"
  } 2>&1 | tee "$OUT/step.log"
  tar -C "$WORK" -czf "$OUT/qualify.tar.gz" numerics numerics.log mutation mutation.log keys/signing-key.pub.pem \
    2>/dev/null
  ;;
numerics-part)
  signed_gate_run numerics-part "${NAME:-numerics-part-h200}" "${PART_TIMEOUT:-400}" "numerics gate items: -k ${K:?}" \
    "$K" gates/kernel_numerics.yaml
  ;;
targets)
  signed_gate_run targets targets-h200 "${TARGETS_TIMEOUT:-540}" "decode targets + numerics envelope cells in one run" \
    "decode-parity or decode-b16 or decode-b64 or numerics-envelope-decode or numerics-envelope-prefill or numerics-envelope-p16" \
    gates/gpu/perf_targets.yaml gates/kernel_numerics.yaml
  ;;
prefill)
  signed_gate_run prefill shared-pages-h200 "${PREFILL_TIMEOUT:-540}" "perf.yaml shared-page items (FA3, FlashInfer)" \
    "shared-pages or numerics-envelope-decode or numerics-envelope-prefill or gluon-envelope-p8" gates/perf.yaml \
    gates/kernel_numerics.yaml gates/kernel_numerics_gluon.yaml
  ;;
counters)
  signed_gate_run counters fa3-counters-h200 "${COUNTERS_TIMEOUT:-540}" \
    "perf.yaml FA3 shared-page item, counters of both sides" \
    "perf-shared-vs-fa3-shared-pages or numerics-envelope-decode or numerics-envelope-prefill or gluon-envelope-p8" \
    gates/perf.yaml gates/kernel_numerics.yaml gates/kernel_numerics_gluon.yaml
  ;;
gluon)
  {
    source .gpu/setup.sh >/dev/null 2>&1
    install; keys
    gpu
    log "Gluon prefill: one launch per smoke variant, each under a timeout (a hang costs one variant)"
    bad=0
    smoke=""
    # A smoke list that cannot be made is a failure, not an empty smoke that lets the gates run.
    if [ "${GLUON_SMOKE:-1}" = 1 ]; then
      smoke=$(python3 scripts/gluon_smoke.py --list) || { echo "smoke: no variant list"; bad=1; }
    fi
    for v in $smoke; do
      timeout 75 python3 scripts/gluon_smoke.py --variant "$v" >"$WORK/smoke-$v.log" 2>&1
      rc=$?
      tail -n 1 "$WORK/smoke-$v.log" | cut -c1-220
      [ "$rc" -eq 0 ] || bad=1
      # A hang is most likely the barrier protocol, which every variant shares: one costs 75 s, not all eight.
      [ "$rc" -eq 124 ] && { echo "smoke: $v timed out; the other variants are not tried"; break; }
    done
    if [ "${GLUON_TESTS:-0}" != 0 ]; then
      # The offline builds (tests/gluon, ~3 min) also run on the CPU host (`nox -s gluon`): GLUON_OFFLINE=1 adds them.
      # GLUON_TESTS=all runs every kernel test on the compiled kernels, whose default prefill is now the Gluon one.
      offline=""
      [ "${GLUON_OFFLINE:-0}" = 1 ] && offline=tests/gluon
      tests="tests/kernels/test_gluon_prefill_gpu.py tests/kernels/test_gluon_api.py"
      [ "$GLUON_TESTS" = all ] && tests=tests/kernels
      log "GPU tests ($tests) ${offline:+and offline builds}"
      # shellcheck disable=SC2086
      timeout "${GLUON_TESTS_S:-220}" python3 -m pytest $offline $tests -q -rs -n 8 -p no:cacheprovider \
        >"$OUT/gluon-tests.log" 2>&1 || bad=1
      grep -E "passed|failed|^FAILED|^ERROR" "$OUT/gluon-tests.log" | tail -n 20
    fi
    if [ "${GLUON_HOST:-0}" = 1 ]; then
      # Host time per layer of a batch-1 prefill (the piecewise step behind the time to the first token), each
      # prefill kernel through Triton's JIT launch and through its compiled launcher.
      for impl in triton gluon; do
        log "host time per layer, $impl prefill"
        timeout 90 python3 scripts/host_overhead.py --prefill-impl "$impl" --out "$OUT/host-$impl.json" 2>&1 | tail -n 7
      done
    fi
    if [ "$bad" -eq 0 ] && [ "${GLUON_GATES:-1}" = 1 ]; then
      rm -rf "$WORK/gluon-numerics" "$WORK/gluon-mutation"
      log "Gluon numerics gate (+ the Triton kernel's padding-key cells) and mutants, side by side"
      signed_run gluon-numerics numerics-gluon-h200 380 gates/kernel_numerics_gluon.yaml gates/kernel_numerics.yaml \
        -k "gluon or numerics-padding-keys" &
      numerics=$!
      signed_mutants gluon-mutation mutation-gluon-h200 380 "$(mutant_jobs)" 300 mutation/cartridge_attn_gluon.yaml
      wait "$numerics"
      grep -E "^  [a-z]|VERDICT|passed|failed" "$WORK/gluon-numerics.log" | tail -n 20
      grep -E "survived|broken|inconclusive|verdict" "$WORK/gluon-mutation.log" | tail -n 6
    fi
  } 2>&1 | tee "$OUT/step.log"
  tar -C "$WORK" -czf "$OUT/gluon.tar.gz" gluon-numerics gluon-numerics.log gluon-mutation gluon-mutation.log \
    keys/signing-key.pub.pem $(cd "$WORK" && ls smoke-*.log) 2>/dev/null
  ;;
requalify-gluon)
  {
    source .gpu/setup.sh >/dev/null 2>&1
    install; keys
    gpu
    log "GPU tests: the Gluon prefill and the dispatch"
    timeout "${GLUON_TESTS_S:-200}" python3 -m pytest tests/kernels/test_gluon_prefill_gpu.py \
      tests/kernels/test_gluon_api.py tests/kernels/test_dispatch.py -q -rs -n 8 -p no:cacheprovider \
      >"$OUT/gluon-tests.log" 2>&1
    rc=$?
    echo "pytest exit $rc"
    grep -E "passed|failed|^FAILED|^ERROR" "$OUT/gluon-tests.log" | tail -n 12
    if [ "$rc" -eq 0 ]; then
      rm -rf "$WORK/numerics" "$WORK/gluon-mutation"
      log "the default numerics gates and the Gluon prefill's mutants, side by side"
      signed_run numerics numerics-h200 "${NUMERICS_LIMIT:-400}" gates/kernel_numerics.yaml \
        gates/kernel_numerics_gluon.yaml --gpus "${GPUS:-auto}" --workers-per-gpu "${WORKERS_PER_GPU:-4}" &
      numerics=$!
      signed_mutants gluon-mutation mutation-gluon-h200 400 "$(mutant_jobs)" "${EACH_S:-360}" \
        mutation/cartridge_attn_gluon.yaml
      wait "$numerics"
      tail -n 25 "$WORK/numerics.log"
      grep -E "survived|broken|inconclusive|verdict" "$WORK/gluon-mutation.log" | tail -n 6
    fi
  } 2>&1 | tee "$OUT/step.log"
  tar -C "$WORK" -czf "$OUT/requalify-gluon.tar.gz" numerics numerics.log gluon-mutation gluon-mutation.log \
    keys/signing-key.pub.pem 2>/dev/null
  ;;
gluon-bench)
  {
    source .gpu/setup.sh >/dev/null 2>&1
    gpu
    log "prefill per layer: Triton and Gluon fused K16/V8 beside FlashInfer (FA3) over shared pages"
    timeout 200 python3 scripts/bench_attention.py --out "$WORK/gluon-bench" --commit "$commit" --only prefill \
      --implementations fused-k16v8-triton fused-k16v8-gluon flashinfer-shared-pages-bf16 --repetitions 20 \
      >"$OUT/gluon-bench.log" 2>&1
    echo "bench exit $?"
    grep "|" "$OUT/gluon-bench.log" | tail -n 10
    if [ "${GLUON_SWEEP:-0}" = 1 ]; then
      log "the Gluon prefill's tile shapes and ring depths at every prefill point"
      timeout 240 python3 scripts/bench_attention.py --out "$WORK/gluon-sweep" --commit "$commit" --only prefill \
        --tune --sweep-only --prefill-impls gluon >"$OUT/gluon-sweep.log" 2>&1
      echo "sweep exit $?"
      python3 - "$WORK/gluon-sweep/sweep.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["sweep"]:
    c = r["config"]
    print(r["batch"], r["tokens"], f"m{c['block_m']}n{c['block_n']}s{c['num_stages']}",
          r.get("per_layer_us") or r.get("error", "")[:120], (r.get("binary") or {}).get("registers"))
PY
      cp "$WORK/gluon-sweep/sweep.json" "$OUT/gluon-sweep.json" 2>/dev/null
    fi
  } 2>&1 | tee "$OUT/bench-step.log"
  cp "$WORK/gluon-bench/"*.json "$OUT/" 2>/dev/null
  ;;
gluon-profile)
  # Where the Gluon prefill's time goes against FlashInfer's FA3 at one point (batch PROFILE_B, suffix PROFILE_S):
  # per-layer times of both Gluon V dtypes (the BF16 cartridge V has no FP8 staging) beside the Triton prefill and
  # FA3, then Nsight Compute of one launch of each Gluon variant (full set, with per-SASS-line stall sampling) and
  # of FA3's kernel (speed of light, warp states).
  {
    source .gpu/setup.sh >/dev/null 2>&1
    gpu
    log "prefill per layer: Gluon K16/V8 and K16/V16, the Triton prefill and FlashInfer's FA3 over shared pages"
    timeout 200 python3 scripts/bench_attention.py --out "$WORK/gluon-profile" --commit "$commit" --only prefill \
      --implementations fused-k16v8-triton fused-k16v8-gluon fused-k16v16-gluon flashinfer-shared-pages-bf16 \
      --repetitions 20 >"$OUT/gluon-profile-bench.log" 2>&1
    echo "bench exit $?"
    grep "|" "$OUT/gluon-profile-bench.log" | tail -n 10
    b=${PROFILE_B:-16} s=${PROFILE_S:-512}
    for impl in fused-k16v8-gluon fused-k16v16-gluon; do
      log "Nsight Compute: $impl at batch $b, suffix $s"
      timeout 120 ncu --clock-control none --set full --import-source no -k regex:cartridge_prefill_ws \
        --launch-skip 3 --launch-count 1 -f -o "$WORK/$impl" \
        python3 scripts/profile_decode.py --kind prefill --batch "$b" --live "$s" --implementation "$impl" \
        >"$OUT/ncu-$impl.log" 2>&1
      echo "ncu exit $?"
      ncu -i "$WORK/$impl.ncu-rep" --page details >"$OUT/ncu-$impl-details.txt" 2>&1
      ncu -i "$WORK/$impl.ncu-rep" --page source --print-source sass --csv >"$OUT/ncu-$impl-sass.csv" 2>&1
      gzip -9 -n -f "$OUT/ncu-$impl-sass.csv"
      grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issued Ipc" \
        "$OUT/ncu-$impl-details.txt" | head -n 8
    done
    log "Nsight Compute: FlashInfer's FA3 prefill at batch $b, suffix $s"
    timeout 120 ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section LaunchStats -k regex:'Prefill|prefill|Flash|flash|Fmha|fmha|device_kernel' \
      --launch-skip 3 --launch-count 1 \
      python3 scripts/profile_decode.py --kind prefill --batch "$b" --live "$s" \
      --implementation flashinfer-shared-pages-bf16 >"$OUT/ncu-fa3-details.txt" 2>&1
    echo "ncu exit $?"
    grep -E "^  [A-Za-z_]|Duration|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Issued Ipc" \
      "$OUT/ncu-fa3-details.txt" | head -n 10
  } 2>&1 | tee "$OUT/profile-step.log"
  cp "$WORK/gluon-profile/"*.json "$OUT/" 2>/dev/null
  ;;
gluon-perf)
  signed_gate_run gluon-perf gluon-perf-h200 "${GLUON_PERF_TIMEOUT:-540}" \
    "Gluon prefill vs FA3 shared pages and the Triton prefill, + both prefills' numerics envelope cells" \
    "gluon-prefill or gluon-envelope-p8 or numerics-envelope-prefill" gates/gpu/perf_gluon.yaml \
    gates/kernel_numerics_gluon.yaml gates/kernel_numerics.yaml
  ;;
cascade-perf)
  signed_gate_run cascade-perf cascade-perf-h200 "${CASCADE_PERF_TIMEOUT:-540}" \
    "decode cascade vs the fused decode and FA3 shared pages, + the cascade's numerics cells" \
    "cascade-vs or cascade-b16 or cascade-b64 or numerics-cascade-decode" gates/gpu/perf_cascade.yaml \
    gates/kernel_numerics.yaml
  ;;
*)
  echo "unknown step $step"
  exit 2
  ;;
esac
