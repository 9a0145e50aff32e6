#!/usr/bin/env bash
# The perf gate on the SM90 host, in one device call (project root, `.gpu` carried):
#   1. run 1: gates/perf.yaml without the release gate, signed with a throw-away key (the "last release");
#   2. run 2: the whole gates/perf.yaml, perf-release compared against run 1's verified envelope;
#   3. the slowed-candidate check (gates/gpu/perf_slowed.yaml): every item must FAIL;
#   (targets, only when PERF_STEPS names it) issue 17's decode targets (gates/gpu/perf_targets.yaml), signed;
#   4. tables: run 1 vs run 2 (is each ratio inside the other run's CI?) and the slowed check.
# Writes under $OUT (at most 8 files come back): perf.log, compare.txt, run1/run1.json, run1/run1.dsse.json,
# run2/run2.json, slowed/slowed.json (+ jit-cache.tar.xz* with SAVE_CACHE=1).
# Timeouts per step (s): RUN1_TIMEOUT (420: 7 implementations x 3 processes, the FA3 one importing vLLM), RUN2_TIMEOUT
# (240), TARGETS_TIMEOUT (400; TARGETS_K selects items, e.g. "p8"), SLOWED_TIMEOUT (90); SKIP_RUN2=1 skips step 2.
# Within one call's BUDGET run 1 leaves no room for run 2: give run 2 and targets calls of their own (PERF_STEPS).
# The FA3 baseline needs vLLM: one call that carries the whole .gpu (FlashInfer unpacked into /tmp), then its parts 1
# and 2 (`bash scripts/gpu_graphs.sh stage N`), then this script carrying .gpu/setup.sh and .gpu/save-cache.sh (not
# the whole .gpu: with a vLLM part it passes the 64 MiB carry limit) with .vllm/3, MANIFEST, stage.sh and setup.sh.
# Split over several device calls (the host keeps /tmp while it stays up between back-to-back calls):
# PERF_STEPS (default "run1 run2 slowed") picks the steps, PERF_WORK (default $OUT) is where results live between
# calls (e.g. /tmp/perf-work); then everything under PERF_WORK also comes back as $OUT/perf.tar.gz. A later call
# needs only .gpu/setup.sh carried: FlashInfer and its JIT cache stay unpacked in /tmp.
# BUDGET (570) bounds the whole script (a device call allows 600 s): each step's timeout is cut to what is left
# after keeping SLOWED_TIMEOUT + 10 s for the later steps, and a step with under 30 s left is skipped.
# With one process per implementation an H200 took 90 s for run 1 (5 workers + 1 ncu replay; the worker start,
# torch import and Triton + FlashInfer JIT load, dominates) and 23 s for the slowed check. With 3 processes per
# implementation run 1 starts 15 workers + 1 ncu replay (expected ~200-240 s), run 2 the same plus the release
# comparison, the slowed check 4 workers (2 processes each, expected ~50 s).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
W=${PERF_WORK:-$OUT}
STEPS=" ${PERF_STEPS:-run1 run2 slowed} "
mkdir -p "$W"
source .gpu/setup.sh >>"$W/perf.log" 2>&1
# vLLM for the FA3 baseline (fa3-shared-pages-bf16): parts 1 and 2 staged by earlier calls (gpu_graphs.sh stage N),
# part 3 carried with this one; without it that baseline's items are skipped with the reason.
source scripts/gpu_lib.sh
vllm_if_staged >>"$W/perf.log" 2>&1 || echo "vLLM not set up (perf.log says why): the FA3 items are skipped"
export PYTHONUNBUFFERED=1
qualify() { python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' "$@"; }
log() { echo "=== $(date +%T) $*" | tee -a "$W/perf.log"; }
BUDGET=${BUDGET:-570}
# step_timeout WANTED KEEP: WANTED, cut to the budget left after keeping KEEP seconds for the later steps.
step_timeout() {
  local t=$((BUDGET - SECONDS - $2))
  ((t > $1)) && t=$1
  ((t < 1)) && t=1 # never 0: `timeout 0` would mean no limit at all
  echo "$t"
}
KEEP=$((${SLOWED_TIMEOUT:-90} + 10))

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee -a "$W/perf.log"
keys=$W/keys
[[ -f $keys/signing-key.pem ]] || qualify keygen --out "$keys" >>"$W/perf.log" 2>&1
export QUALIFY_BASELINE_PUBLIC_KEY=$keys/signing-key.pub.pem

if [[ $STEPS == *" run1 "* ]]; then
  t=$(step_timeout "${RUN1_TIMEOUT:-420}" "$KEEP")
  log "run 1 (no release gate, signed; timeout ${t} s)"
  timeout "$t" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' \
    run gates/perf.yaml -k 'not release' --out "$W/run1" --name run1 --sign-key "$keys/signing-key.pem" \
    --non-release -- -v >>"$W/perf.log" 2>&1
  log "run 1 exit $?"
fi

t=$(step_timeout "${RUN2_TIMEOUT:-240}" "$KEEP")
if [[ $STEPS == *" run2 "* && ${SKIP_RUN2:-0} != 1 && -f $W/run1/run1.dsse.json ]] && ((t >= 30)); then
  log "run 2 (all gates; release = run 1; timeout ${t} s)"
  timeout "$t" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' \
    run gates/perf.yaml --baseline "$W/run1/run1.dsse.json" --out "$W/run2" --name run2 --non-release \
    >>"$W/perf.log" 2>&1
  log "run 2 exit $?"
fi

t=$(step_timeout "${TARGETS_TIMEOUT:-400}" "$KEEP")
if [[ $STEPS == *" targets "* ]] && ((t >= 30)); then
  log "issue 17's decode targets (gates/gpu/perf_targets.yaml, signed; timeout ${t} s)"
  timeout "$t" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' \
    run gates/gpu/perf_targets.yaml ${TARGETS_K:+-k "$TARGETS_K"} --out "$W/targets" --name targets \
    --sign-key "$keys/signing-key.pem" --non-release -- -v >>"$W/perf.log" 2>&1
  log "targets exit $?"
fi

t=$(step_timeout "${SLOWED_TIMEOUT:-90}" 10)
if [[ $STEPS != *" slowed "* ]]; then
  :
elif ((t >= 30)); then
  log "slowed candidate (every item must fail; timeout ${t} s)"
  timeout "$t" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' \
    run gates/gpu/perf_slowed.yaml --out "$W/slowed" --name slowed --non-release >>"$W/perf.log" 2>&1
  log "slowed exit $? (1 = FAIL verdict, as it must be)"
else
  log "slowed candidate skipped: ${t} s left of BUDGET=${BUDGET}"
fi

{
  reports=()
  for r in "$W/run1/run1.json" "$W/run2/run2.json" "$W/targets/targets.json"; do [[ -f $r ]] && reports+=("$r"); done
  ((${#reports[@]})) && qualify perf-summary "${reports[@]}"
  [[ -f $W/slowed/slowed.json ]] && qualify perf-summary "$W/slowed/slowed.json"
} 2>&1 | tee "$W/compare.txt"
grep -E "^(FAILED|ERROR)|Error|error:" "$W/perf.log" | head -20
if [[ $W != "$OUT" ]]; then
  cp "$W/compare.txt" "$W/perf.log" "$OUT/"
  tar -C "$W" -czf "$OUT/perf.tar.gz" --exclude=keys/signing-key.pem .
fi
[[ ${SAVE_CACHE:-0} == 1 ]] && bash .gpu/save-cache.sh >/dev/null 2>&1
exit 0
