#!/usr/bin/env bash
# The perf gate on the SM90 host, in one device call (project root, `.gpu` carried):
#   1. run 1: gates/perf.yaml without the release gate, signed with a throw-away key (the "last release");
#   2. run 2: the whole gates/perf.yaml, perf-release compared against run 1's verified envelope;
#   3. the slowed-candidate check (benchmarks/perf/perf_slowed.yaml): every item must FAIL;
#   4. tables: run 1 vs run 2 (is each ratio inside the other run's CI?) and the slowed check.
# Writes under $OUT (at most 8 files come back): perf.log, compare.txt, run1/run1.json, run1/run1.dsse.json,
# run2/run2.json, slowed/slowed.json (+ jit-cache.tar.xz* with SAVE_CACHE=1).
# Timeouts per step (s): RUN1_TIMEOUT (130), RUN2_TIMEOUT (110), SLOWED_TIMEOUT (45); SKIP_RUN2=1 skips step 2.
# Measured on an H200: run 1 90 s, slowed 23 s (run 2 expected ~90 s): about 215 s with setup.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source .gpu/setup.sh >"$OUT/perf.log" 2>&1
export PYTHONUNBUFFERED=1
qualify() { python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' "$@"; }
log() { echo "=== $(date +%T) $*" | tee -a "$OUT/perf.log"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee -a "$OUT/perf.log"
keys=$(mktemp -d)/keys
qualify keygen --out "$keys" >>"$OUT/perf.log" 2>&1
export QUALIFY_BASELINE_PUBLIC_KEY=$keys/signing-key.pub.pem

log "run 1 (no release gate, signed)"
timeout "${RUN1_TIMEOUT:-130}" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' \
  run gates/perf.yaml -k 'not release' --out "$OUT/run1" --name run1 --sign-key "$keys/signing-key.pem" \
  --non-release -- -v >>"$OUT/perf.log" 2>&1
log "run 1 exit $?"

if [[ ${SKIP_RUN2:-0} != 1 && -f $OUT/run1/run1.dsse.json ]]; then
  log "run 2 (all gates; release = run 1)"
  timeout "${RUN2_TIMEOUT:-110}" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' \
    run gates/perf.yaml --baseline "$OUT/run1/run1.dsse.json" --out "$OUT/run2" --name run2 --non-release \
    >>"$OUT/perf.log" 2>&1
  log "run 2 exit $?"
fi

log "slowed candidate (every item must fail)"
timeout "${SLOWED_TIMEOUT:-45}" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' \
  run benchmarks/perf/perf_slowed.yaml --out "$OUT/slowed" --name slowed --non-release >>"$OUT/perf.log" 2>&1
log "slowed exit $? (1 = FAIL verdict, as it must be)"

{
  reports=()
  for r in "$OUT/run1/run1.json" "$OUT/run2/run2.json"; do [[ -f $r ]] && reports+=("$r"); done
  ((${#reports[@]})) && python3 -m qualify.perf.summary "${reports[@]}"
  [[ -f $OUT/slowed/slowed.json ]] && python3 -m qualify.perf.summary "$OUT/slowed/slowed.json"
} 2>&1 | tee "$OUT/compare.txt"
grep -E "^(FAILED|ERROR)|Error|error:" "$OUT/perf.log" | head -20
[[ ${SAVE_CACHE:-0} == 1 ]] && bash .gpu/save-cache.sh >/dev/null 2>&1
exit 0
