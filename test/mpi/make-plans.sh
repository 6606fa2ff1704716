#!/usr/bin/env bash
# make-plans.sh TPC FIXTURES OUT: the plans the MPI fixture tests run, written once per build: each shared
# fixture compiled for 2 devices (equal split) and for 3 devices (--tensor-split 3,2,1), max batch 16 as in
# test/e2e, as OUT/<model>-d<N>.plan. A fixture tpc cannot compile (an architecture or weight type not
# supported yet) is listed with the compiler's reason and left out: the MPI tests name the fixtures they
# run, and one of theirs without a plan fails there.
set -euo pipefail
tpc=$1 fixtures=$2 out=$3
mkdir -p "$out"
for gguf in "$fixtures"/*.gguf; do
  model=$(basename "$gguf" .gguf)
  if ! why=$("$tpc" compile "$gguf" --devices 2 --max-batch 16 -o "$out/$model-d2.plan" 2>&1 >/dev/null); then
    echo "make-plans: $model left out: ${why##*error: }"
    continue
  fi
  "$tpc" compile "$gguf" --devices 3 --tensor-split 3,2,1 --max-batch 16 -o "$out/$model-d3.plan" >/dev/null
done
echo "make-plans: $(ls "$out" | wc -l) plans in $out"
