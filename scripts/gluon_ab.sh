#!/usr/bin/env bash
# A/B of a candidate change to the Gluon prefill on the SM90 host, in one device call (carry .gpu; project root):
#   PATCH=results/<run>/<change>.patch bash scripts/gluon_ab.sh        (SWEEP=0: no tile sweeps)
# The patch (git apply; it may touch the kernel's host side too) is tested first: the Gluon GPU tests on the patched
# files, and a failure or a hang ends the call. Then prefill per layer of the patched files ("new") and the tree's
# ("base"), swapped in together, interleaved (new a, base a, new b, base b; FlashInfer's FA3 over shared pages beside
# new a), then the Gluon tile sweep of each (bench_attention.py --tune --sweep-only --prefill-impls gluon), so that
# every tile is timed at every prefill point, not only the one the dispatch picks. Every file the patch touches is the
# tree's again at the end (one it adds is removed). Everything comes back in $OUT/ab.tar.gz (the kernel as new.py /
# base.py, every touched file under new/ and base/); the tables print as they come. Exit 2, with one line, when PATCH is
# unset or does not apply (the tree untouched); 1 when the patched files fail the GPU tests (the tree's put back); 0
# otherwise.
set -uo pipefail
K=kernels/cartridge_attn/_gluon_prefill.py
patch=${PATCH:-}
[ -n "$patch" ] || { echo "gluon_ab.sh: set PATCH to the change's patch file (git apply format)" >&2; exit 2; }
# Checked before anything is copied or changed: a patch that does not apply leaves the tree as it was.
git apply --check "$patch" 2>/dev/null || { echo "gluon_ab.sh: $patch does not apply to this tree" >&2; exit 2; }
mapfile -t files < <(git apply --numstat "$patch" | cut -f3)
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
AB=${AB_DIR:-/tmp/ab-out}; rm -rf "$AB"; mkdir -p "$AB"
source .gpu/setup.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
keep() {  # side: copies every touched file as it is now (a file the side lacks, added or deleted, has none)
  for f in "${files[@]}"; do
    if [ -e "$f" ]; then mkdir -p "$AB/$1/$(dirname "$f")"; cp "$f" "$AB/$1/$f"; fi
  done
}
use() {  # side: puts that side's copies in place, and removes the files it lacks
  for f in "${files[@]}"; do
    if [ -e "$AB/$1/$f" ]; then cp "$AB/$1/$f" "$f"; else rm -f "$f"; fi
  done
}
keep base; cp "$K" "$AB/base.py"
git apply "$patch"
keep new; cp "$K" "$AB/new.py"
SECONDS=0
bench() {  # name impls...
  local name=$1; shift
  echo "== bench $name at ${SECONDS}s"
  timeout 150 python3 scripts/bench_attention.py --out "/tmp/ab-$name" --commit "$name" --only prefill \
    --implementations "$@" --repetitions 20 >"$AB/bench-$name.log" 2>&1
  echo "exit $?"; grep "|" "$AB/bench-$name.log" | tail -n 8
  for f in /tmp/ab-$name/*.json; do cp "$f" "$AB/$name-$(basename "$f")"; done
}
sweep() {  # name
  echo "== sweep $1 at ${SECONDS}s"
  timeout 170 python3 scripts/bench_attention.py --out "/tmp/ab-sweep-$1" --commit "$1" --only prefill --tune \
    --sweep-only --prefill-impls gluon >"$AB/sweep-$1.log" 2>&1
  echo "exit $?"; cp "/tmp/ab-sweep-$1/sweep.json" "$AB/sweep-$1.json"
}
echo "== GPU tests of the patched kernel"
timeout 200 python3 -m pytest tests/kernels/test_gluon_prefill_gpu.py tests/kernels/test_gluon_api.py -q -rs -n 8 \
  -p no:cacheprovider >"$AB/tests.log" 2>&1
rc=$?
echo "pytest exit $rc"; grep -E "passed|failed|^FAILED|^ERROR" "$AB/tests.log" | tail -n 6
# A hang (a barrier phase gone wrong) or a wrong result ends the call here: no time on timing a broken kernel.
if [ "$rc" -ne 0 ]; then use base; tar -C "$(dirname "$AB")" -czf "$OUT/ab.tar.gz" "$(basename "$AB")"; exit 1; fi
use new; bench newa fused-k16v8 flashinfer-shared-pages-bf16
use base; bench basea fused-k16v8
use new; bench newb fused-k16v8
use base; bench baseb fused-k16v8
if [ "${SWEEP:-1}" = 1 ]; then
  use new; sweep new
  use base; sweep base
fi
use base
tar -C "$(dirname "$AB")" -czf "$OUT/ab.tar.gz" "$(basename "$AB")"
echo "== done at ${SECONDS}s"
