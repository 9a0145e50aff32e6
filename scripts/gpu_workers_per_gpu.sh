#!/usr/bin/env bash
# `qualify run --gpus auto --workers-per-gpu N` against the serial run, on the SM90 host (project root, carry .gpu):
#
#   K="numerics-envelope-decode" N=4 bash scripts/gpu_workers_per_gpu.sh
#
# Both runs select the numerics items K selects, each with its own empty Triton cache (both compile cold), serial
# first; then the two reports are compared item by item (status and every check's observed value) and timed.
# Logs and both reports come back in $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
WORK=/tmp/workers-work
rm -rf "$WORK" && mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
source scripts/gpu_lib.sh
source .gpu/setup.sh >/dev/null 2>&1
install
K=${K:?the numerics items to run, a -k expression}
N=${N:-4}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
one() {  # one NAME [qualify run options...]: the selected items, a fresh Triton cache, the wall time
  local name=$1
  shift
  SECONDS=0
  TRITON_CACHE_DIR="$WORK/cache-$name" timeout "${LIMIT:-150}" python3 -c \
    'import sys; from qualify.cli import main; sys.exit(main())' run gates/kernel_numerics.yaml -k "$K" \
    --out "$WORK" --name "$name" --non-release "$@" -- -q >"$OUT/$name.log" 2>&1
  echo "$name: exit $? after ${SECONDS} s"
}
one serial
one "shared$N" --gpus auto --workers-per-gpu "$N"
python3 - "$WORK/serial.json" "$WORK/shared$N.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def items(r):
    return {i["name"]: (i["status"], [c.get("observed") for c in i.get("checks") or []]) for i in r["items"]}
ia, ib = items(a), items(b)
differ = [n for n in ia if ia[n] != ib.get(n)]
ran = sum(1 for s, _ in ia.values() if s != "deselected")
print(f"verdicts {a['verdict']} / {b['verdict']}; {ran} items ran; {len(differ)} differ in status or an observed value")
for n in differ[:10]:
    print("  differs:", n, ia[n], ib.get(n))
print("workers:", [(w["worker"], w["gpu"], w["items"]) for w in b["gpus"]["workers"]], "per GPU", b["gpus"]["workers_per_gpu"])
EOF
cp "$WORK"/serial.json "$WORK/shared$N.json" "$OUT/" 2>/dev/null
