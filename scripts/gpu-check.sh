#!/usr/bin/env bash
# The GPU checks of the CUDA back-end, run on the GPU machine. Builds nothing: it runs binaries built
# here and bundled with ../shared/tools/device-bundle.sh. Prepare (on the build machine):
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build --target ferry_test_gpu
#   ../shared/tools/device-bundle.sh .bundle build/tests/ferry_test_gpu
#   cp scripts/gpu-check.sh .bundle/
# then one device call with carry [".bundle"] and the command `bash .bundle/gpu-check.sh .bundle`, from
# the repository root (the fixtures are read from tests/fixtures there; FERRY_FIXTURES_DIR overrides).
#
# Writes to $OUT (or ./gpu-out): gpu.txt (the card), gpu_tests.log + gpu_tests.json (every test),
# memcheck.log (compute-sanitizer over the op tests, when the tool is there), summary.txt (the key
# numbers: per-op errors, fixture errors, matmul GB/s). Exit status: that of the test run.
set -uo pipefail
B=$(cd "${1:-.bundle}" && pwd)
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FERRY_FIXTURES_DIR="${FERRY_FIXTURES_DIR:-$PWD/tests/fixtures}"
T="$B/bin/ferry_test_gpu"

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

# 1. Every GPU test (op checks, fixtures, exactness, benchmark).
timeout "${GPU_CHECK_TIMEOUT:-360}" "$T" --gtest_output="json:$OUT/gpu_tests.json" 2>&1 | tee "$OUT/gpu_tests.log"
rc=${PIPESTATUS[0]}

# 2. Memory errors and races in the kernels: the op tests (small shapes) under compute-sanitizer.
if command -v compute-sanitizer > /dev/null && [ "${GPU_CHECK_MEMCHECK:-1}" = 1 ]; then
  timeout "${GPU_CHECK_MEMCHECK_TIMEOUT:-150}" compute-sanitizer --tool memcheck --leak-check no \
    "$T" --gtest_filter="${GPU_CHECK_MEMCHECK_FILTER:-Ops.*:Shapes/*:-*Bench*:*SixteenRowBlock*}" > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $? : $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)" | tee -a "$OUT/gpu_tests.log"
fi

# 3. Optional (GPU_CHECK_NCU=1): Nsight Compute on three benchmark matmuls (the benchmark launches,
#    per row count, 8 warm-up calls then 7 graph replays of 96 calls: 680 launches; the first mxfp4
#    n=1 call is launch 0, mxfp4 n=16 starts at 2720, q8_0 n=1 at 3400). Clocks are left alone.
if [ "${GPU_CHECK_NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
  for skip in 0 2720 3400; do
    timeout 90 ncu --clock-control none --kernel-name 'regex:matmul_(fast_)?kernel' --launch-skip "$skip" --launch-count 1 \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
      --section SchedulerStats "$T" --gtest_filter='Ops.MatmulBenchWeightBandwidth' >> "$OUT/ncu.txt" 2>&1
  done
  grep -E 'matmul_(fast_)?kernel|Duration|SM Frequency|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Issued Warp|No Eligible|Registers Per|Stall|Waves Per SM' \
    "$OUT/ncu.txt" | grep -v '^\[bench\]' | head -80 > "$OUT/ncu_key.txt"
fi

# 4. The short table: key numbers last, so they are what a device call's output tail shows.
{
  grep -E '^\[(gpu-op|gpu-model|bench)\]' "$OUT/gpu_tests.log"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|tests? ran|FAILED  \]' "$OUT/gpu_tests.log" | tail -40
  grep -E 'memcheck exit' "$OUT/gpu_tests.log"
  [ -f "$OUT/ncu_key.txt" ] && cat "$OUT/ncu_key.txt"
  echo "gpu tests exit status: $rc"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
exit "$rc"
