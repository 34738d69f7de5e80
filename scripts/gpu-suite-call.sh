#!/usr/bin/env bash
# The shortest useful device call (building nothing; `MIN=1 bash scripts/gpu-bundle.sh`, carry [".bundle"]): the GPU
# suite at the defaults (benchmarks left out) into $OUT/suite.log, then the model tests again at each level in
# EXTRA_LEVELS (default 1: x as hi only; 3: x's lo as E4M3 into the mxfp4 experts) into $OUT/models-l<levels>.log,
# with BENCH_FILTER set, those benchmarks into $OUT/bench.log, and with MEMCHECK_FILTER set, compute-sanitizer's memcheck over those tests (MEMCHECK_LEVELS: FERRY_MMA_LEVELS for
# it) into $OUT/memcheck.log. No slice, no timings.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout "${SUITE_TIMEOUT:-120}" "$B/bin/ferry_test_gpu" --gtest_filter="${SUITE_FILTER:--*Bench*}" > "$OUT/suite.log" 2>&1
echo "suite exit $?"
grep -E '^\[  (PASSED|FAILED) +\]|tests? ran|Failure' "$OUT/suite.log" | head -30
if [ -n "${BENCH_FILTER:-}" ]; then  # benchmarks by name (the suite leaves them out), into $OUT/bench.log
  timeout "${BENCH_TIMEOUT:-60}" "$B/bin/ferry_test_gpu" --gtest_filter="$BENCH_FILTER" > "$OUT/bench.log" 2>&1
  echo "benchmarks exit $?"
  grep -E '^\[(mma-rate|bench|q8tp)\]|^\[  (PASSED|FAILED) +\]' "$OUT/bench.log" | head -20
fi
for lv in ${EXTRA_LEVELS:-1}; do
  FERRY_MMA_LEVELS=$lv timeout "${MODEL_TIMEOUT:-60}" "$B/bin/ferry_test_gpu" \
    --gtest_filter="${MODEL_FILTER:-*GpuHf*:GpuK3*}" > "$OUT/models-l$lv.log" 2>&1
  echo "levels $lv: exit $?"
  grep -E '^\[  (PASSED|FAILED) +\]|gpu-model|Failure|Expected|Which is|Value of|  Actual|tests? ran' "$OUT/models-l$lv.log" | head -50
done
if [ -n "${MEMCHECK_FILTER:-}" ] && command -v compute-sanitizer > /dev/null; then
  FERRY_MMA_LEVELS=${MEMCHECK_LEVELS:-2} timeout "${MEMCHECK_TIMEOUT:-120}" compute-sanitizer --tool memcheck --leak-check no \
    "$B/bin/ferry_test_gpu" --gtest_filter="$MEMCHECK_FILTER" > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $? : $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  grep -E '^\[  (PASSED|FAILED) +\]|Invalid|out of bounds' "$OUT/memcheck.log" | head -10
fi
