#!/usr/bin/env bash
# One device call of checks, kernel benchmarks and decode arms, built nothing (`bash scripts/gpu-bundle.sh`
# here, carry [".bundle"]): the GPU suite without benchmarks, compute-sanitizer memcheck over MEMCHECK_FILTER
# (with MEMCHECK_ENV set), the benchmarks of BENCH_FILTER, then scripts/gpu-decode.sh with ARMS / REPS.
# Writes $OUT/call.log, $OUT/gpu_tests.log, $OUT/memcheck.log, $OUT/bench.log and gpu-decode.sh's files.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
exec > >(tee "$OUT/call.log") 2>&1
export FERRY_FIXTURES_DIR="$PWD/tests/fixtures"
T0=$(date +%s); stamp() { echo "== [$(($(date +%s) - T0)) s] $*"; }
if [ "${TESTS:-1}" = 1 ]; then
  stamp "GPU tests ${TEST_FILTER:=-*Bench*}"
  timeout ${TEST_TIMEOUT:-200} "$B/bin/ferry_test_gpu" --gtest_filter="$TEST_FILTER" > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests exit $?"
  grep -E '^\[  (FAILED|PASSED) +\]|tests? ran|Failure|Expected|Which is' "$OUT/gpu_tests.log" | head -40
fi
if [ -n "${MEMCHECK_FILTER:-}" ] && command -v compute-sanitizer > /dev/null; then
  stamp "memcheck $MEMCHECK_FILTER (${MEMCHECK_ENV:-})"
  env ${MEMCHECK_ENV:-} timeout ${MEMCHECK_TIMEOUT:-150} compute-sanitizer --tool memcheck --leak-check no \
    "$B/bin/ferry_test_gpu" --gtest_filter="$MEMCHECK_FILTER" > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $? : $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  grep -E '^\[  (FAILED|PASSED) +\]' "$OUT/memcheck.log" | head
fi
if [ -n "${BENCH_FILTER:-}" ]; then
  stamp "benchmarks $BENCH_FILTER"
  timeout ${BENCH_TIMEOUT:-150} "$B/bin/ferry_test_gpu" --gtest_filter="$BENCH_FILTER" > "$OUT/bench.log" 2>&1
  echo "bench exit $?"
  grep -E '^\[(q8t|bench|smallop|gpu-op)\]' "$OUT/bench.log" | head -120
fi
if [ -n "${ARMS:-}" ]; then
  stamp "decode arms $ARMS"
  TESTS=0 MEMCHECK=0 BENCH=0 PROFILE=${PROFILE:-0} bash "$(dirname "$0")/gpu-decode.sh" > /dev/null 2>&1
  echo "gpu-decode exit $?"
  grep -vE '^\[' "$OUT/decode.log" | grep -E 'decode steady|identical|must be|differ|first|HBM|steady decode|x the floor|exit [^0]' | head -60
fi
stamp done
