#!/usr/bin/env bash
# On the SM90 host (project root, `.gpu` carried and sourced): the GPU tests of the kernel and of the
# numerics gate, then the kernel_numerics gate file through `qualify run`, signed with a throwaway key.
# Logs and the report land in ${OUT:-gpu-out}/numerics/.
set -uo pipefail
out="${OUT:-gpu-out}/numerics"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
status=0
python3 -m pytest -q -m gpu -rs tests/kernels tests/numerics -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log" | tail -n 5
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
keys=$(mktemp -d)/keys
python3 -m qualify.cli keygen --out "$keys" >/dev/null
python3 -m qualify.cli run gates/kernel_numerics.yaml gates/kernel_numerics_gluon.yaml --out "$out" --name numerics-h200 \
  --sign-key "$keys/signing-key.pem" --non-release -- -q 2>&1 | tee "$out/qualify_numerics.log" | tail -n 25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
cp "$keys/signing-key.pub.pem" "$out/numerics-h200.pub.pem"
python3 -m qualify.cli verify "$out/numerics-h200.dsse.json" --key "$keys/signing-key.pub.pem" | head -n 2
exit $status
