# Shell helpers of the GPU host scripts (source it from the project root after setting WORK).
#   log MSG        a timestamped progress line
#   install        the project, editable, without dependencies (the host has no registry): vLLM finds its general
#                  plugin, and qualify its gate kinds, through the project's entry points
#   qualify ARGS   the CLI of this checkout
#   keys           a throw-away signing key in $WORK/keys, made once per host
#   vllm_env       vLLM from the staged parts (.vllm/setup.sh), the project, and cryptography for signing
#   sign_site      cryptography for signing (see below)
#   vllm_if_staged vLLM from staged parts when .vllm/setup.sh came with this call (part 3 staged too if carried):
#                  for calls whose main work needs FlashInfer (.gpu) and only one baseline needs vLLM (FA3)
#   mutant_jobs    mutants at once beside a numerics run (JOBS, else by the GPU's memory)
#   signed_run DIR NAME LIMIT RUN_ARGS...
#                  `qualify run RUN_ARGS` (gate files, -k, options) signed with the throw-away key, non-release,
#                  report NAME in $WORK/DIR, log $WORK/DIR.log, killed after LIMIT s; prints its exit and time
log() { echo "=== $(date +%T) $*"; }
install() { python3 -m pip show -q cartridge-qualify >/dev/null 2>&1 ||
  python3 -m pip install -q --no-build-isolation --no-deps -e . -e tests/plugins/qualify_fake_kind; }
qualify() { python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' "$@"; }
keys() { [[ -f $WORK/keys/signing-key.pem ]] || qualify keygen --out "$WORK/keys" >/dev/null; }
vllm_env() {
  source .vllm/setup.sh || return 1
  install || return 1
  sign_site
}
# sign_site: cryptography for signing, which the image lacks, into /tmp/sign-site once per host: from carried
# .gpu/wheels or .real/wheels (the `sign` step of a host script), else from the copy a .gpu call unpacked into
# /tmp/gpu-site (not the whole of it: its FlashInfer is not the version vLLM expects)
sign_site() {
  if [[ ! -d /tmp/sign-site/cryptography ]]; then
    mkdir -p /tmp/sign-site
    local w
    for w in .gpu/wheels .real/wheels; do compgen -G "$w/cryptography-*.whl" >/dev/null && break; done
    if compgen -G "$w/cryptography-*.whl" >/dev/null; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/sign-site \
        "$w"/cryptography-*.whl "$w"/cffi-*.whl "$w"/pycparser-*.whl
    elif [[ -d /tmp/gpu-site/cryptography ]]; then
      (cd /tmp/gpu-site && cp -r cryptography cryptography-*.dist-info cffi cffi-*.dist-info _cffi_backend*.so \
        pycparser pycparser-*.dist-info /tmp/sign-site/ 2>/dev/null)
    fi
  fi
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/sign-site"
}
# wait_for PIDFILE SECONDS: wait until the process in PIDFILE has ended or SECONDS passed; 0 when it has ended
wait_for() {
  local pid
  pid=$(cat "$1" 2>/dev/null)
  for _ in $(seq 1 "$2"); do
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    sleep 1
  done
  ! kill -0 "$pid" 2>/dev/null
}
vllm_if_staged() {
  [[ -f .vllm/setup.sh ]] || return 0
  { [[ -d .vllm/3 ]] && bash .vllm/stage.sh 3; source .vllm/setup.sh; } >/dev/null 2>&1 ||
    { echo "vLLM not set up: the FA3 baseline (fa3-shared-pages-bf16) is skipped or fails with the reason"; return 1; }
  # Last on the path: FlashInfer keeps the versions it was built with (vLLM's bundle has another apache-tvm-ffi),
  # and the FA3 baseline needs only vLLM's own package and its FA3 extension.
  PYTHONPATH="${PYTHONPATH#/tmp/vllm-site:}:/tmp/vllm-site"
  export PYTHONPATH
}
signed_run() {
  local dir=$1 name=$2 limit=$3
  shift 3
  SECONDS=0
  timeout "$limit" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' run "$@" \
    --out "$WORK/$dir" --name "$name" --sign-key "$WORK/keys/signing-key.pem" --non-release -- -q \
    >"$WORK/$dir.log" 2>&1
  echo "$name: exit $? after ${SECONDS} s"
}
# mutant_jobs: how many mutants run at once beside a numerics run: JOBS when set, else 8 on a GPU of more than 100 GiB
# (an H200) and 4 on less. Eight Gluon mutants beside the numerics gate's four workers ran one item out of an H100's
# 80 GB (results/2026-12-07-gluon-persistent-cut-h100): an item out of memory shows nothing about its mutant.
mutant_jobs() {
  local mib
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1)
  mib=${mib//[[:space:]]/}
  if [[ -n ${JOBS:-} ]]; then echo "$JOBS"
  elif [[ ${mib:-0} =~ ^[0-9]+$ && $mib -gt 102400 ]]; then echo 8
  else echo 4; fi
}
# signed_mutants DIR NAME LIMIT JOBS PER_MUTANT_S CATALOG: one signed `qualify mutants` run of CATALOG under $WORK/DIR,
# its log in $WORK/DIR.log; UNMUTATED=killing-items runs the unmutated copy after the mutants, on their killing items.
signed_mutants() {
  local dir=$1 name=$2 limit=$3 jobs=$4 each=$5 catalog=$6
  SECONDS=0
  timeout "$limit" python3 -c 'import sys; from qualify.cli import main; sys.exit(main())' mutants "$catalog" \
    --jobs "$jobs" --timeout-s "$each" --out "$WORK/$dir" --name "$name" --sign-key "$WORK/keys/signing-key.pem" \
    ${UNMUTATED:+--unmutated "$UNMUTATED"} >"$WORK/$dir.log" 2>&1
  echo "$name: exit $? after ${SECONDS} s"
}
