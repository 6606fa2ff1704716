#!/usr/bin/env bash
# The layering check must fail on a tree that breaks its rules and name each offending include, so the
# `layering` test cannot pass because the script silently checks nothing.
set -uo pipefail
script=$1 tree=$2
out=$(bash "$script" "$tree" 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 1 ] || { echo "FAIL: expected exit 1 on the leaky tree, got $rc"; exit 1; }
grep -q 'runtime/exec/Leak.cpp:3: *#include "runtime/cpu/CpuSession.h"' <<<"$out" ||
  { echo "FAIL: the runtime/exec -> runtime/cpu include was not reported"; exit 1; }
grep -q 'passes/Leak.cpp:3: *#include "compiler/emit/LocalShapes.h"' <<<"$out" ||
  { echo "FAIL: the passes -> compiler include was not reported"; exit 1; }
grep -q 'tools/tpc/Leak.cpp:3: *#include "runtime/cuda/CudaSession.h"' <<<"$out" ||
  { echo "FAIL: the tools -> runtime/cuda include was not reported"; exit 1; }
if grep -q 'tools/tpc/Leak.cpp:2:' <<<"$out"; then echo "FAIL: the plugin's ABI header was reported"; exit 1; fi
echo "PASS: every leak reported, the allowed include not"
