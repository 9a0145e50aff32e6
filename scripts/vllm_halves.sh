#!/usr/bin/env bash
# vLLM's staged parts in halves. A part of .vllm (../shared/gpu/vllm/pack.sh) is 34 MB, and the tracked tree passed
# 30 MB once results/ held the signed reports: together they exceed the 64 MiB a device call may carry. Halves of
# 17 MB fit beside the tree.
#
#   bash scripts/vllm_halves.sh split          here: .vllm/h/{1a,1b,2a,2b,3a,3b} from .vllm/{1,2,3} (byte-checked)
#   bash scripts/vllm_halves.sh stage 1a       on the SM90 host, carrying .vllm/h/1a and .vllm/MANIFEST: write the
#                                              first half of part 1 into /tmp/vllm-stage (an "a" half starts its
#                                              piece anew, a "b" half appends to it), as .vllm/stage.sh 1 would
#
# Six back-to-back calls (1a 1b 2a 2b 3a 3b; the host keeps /tmp only while it stays up), then any step that sources
# .vllm/setup.sh (carry it and .gpu/setup.sh): it checks every piece against MANIFEST before installing.
set -euo pipefail
cmd=${1:?usage: vllm_halves.sh split | stage NH (1a, 1b, 2a, 2b, 3a or 3b)}
case $cmd in
split)
  rm -rf .vllm/h
  for n in 1 2 3; do
    piece=$(cd ".vllm/$n" && ls piece*)
    size=$(stat -c %s ".vllm/$n/$piece")
    half=$(((size + 1) / 2))
    mkdir -p ".vllm/h/${n}a" ".vllm/h/${n}b"
    head -c "$half" ".vllm/$n/$piece" >".vllm/h/${n}a/$piece"
    tail -c +"$((half + 1))" ".vllm/$n/$piece" >".vllm/h/${n}b/$piece"
    cat ".vllm/h/${n}a/$piece" ".vllm/h/${n}b/$piece" | cmp -s - ".vllm/$n/$piece" ||
      { echo "part $n: the halves do not rejoin to $piece"; exit 1; }
    for other in ".vllm/$n"/*; do
      [[ $(basename "$other") == "$piece" ]] || cp "$other" ".vllm/h/${n}a/"
    done
  done
  du -sh .vllm/h/*
  ;;
stage)
  half=${2:?usage: vllm_halves.sh stage NH (1a ... 3b)}
  [[ $half =~ ^[123][ab]$ ]] || { echo "stage: $half is not one of 1a 1b 2a 2b 3a 3b"; exit 2; }
  n=${half:0:1}
  stage_dir=${VLLM_STAGE:-/tmp/vllm-stage}  # .vllm/setup.sh reads /tmp/vllm-stage; tests point elsewhere
  dest=$stage_dir/$n
  mkdir -p "$dest"
  for f in ".vllm/h/$half"/*; do
    name=$(basename "$f")
    if [[ $name == piece* && ${half:1} == b ]]; then
      [[ -f $dest/$name ]] || { echo "stage $half: stage ${n}a first"; exit 1; }
      cat "$f" >>"$dest/$name"
    else
      cp "$f" "$dest/$name"
    fi
  done
  [[ -f .vllm/MANIFEST ]] && cp .vllm/MANIFEST "$stage_dir/MANIFEST"
  ls -la "$dest"
  ;;
*)
  echo "unknown command $cmd"
  exit 2
  ;;
esac
