#!/usr/bin/env bash
# make-plans.sh TPC FIXTURES OUT: the plans the MPI fixture tests run, written once per build: each shared
# fixture compiled for 2 devices (equal split) and for 3 devices (--tensor-split 3,2,1), max batch 16 as in
# test/e2e, as OUT/<model>-d<N>.plan.
set -euo pipefail
tpc=$1 fixtures=$2 out=$3
mkdir -p "$out"
for gguf in "$fixtures"/*.gguf; do
  model=$(basename "$gguf" .gguf)
  "$tpc" compile "$gguf" --devices 2 --max-batch 16 -o "$out/$model-d2.plan" >/dev/null
  "$tpc" compile "$gguf" --devices 3 --tensor-split 3,2,1 --max-batch 16 -o "$out/$model-d3.plan" >/dev/null
done
echo "make-plans: $(ls "$out" | wc -l) plans in $out"
