#!/usr/bin/env bash
# One device call of the kernels work (issue 14): the GPU tests (op checks, exactness, kernel
# benchmarks with their speed-knob sweeps), memcheck over the new kernels' tests, then the resident
# decode of a full-width K3.1 slice (1 dense + 1 MoE layer, experts on /dev/shm) with the binary
# before the change (bin/ferry-before, when bundled) and after: steady rate and --profile-ops.
# Switches: TESTS=0 skips the tests, MEMCHECK=0 the memcheck, NCU=1 / SASS=1 add Nsight Compute and
# SASS of the one-row kernels, MODEL=0 skips the model, LAYERS=N its layers (2: 1 MoE layer).
# Bundle: device-bundle.sh .bundle-kernels build/tests/ferry_test_gpu build/apps/ferry, compressed
# to ferry-bundle.tar.xz, plus this script; command: bash .bundle-kernels/run.sh (carry .bundle-kernels).
set -uo pipefail
B=$(cd "$(dirname "$0")" && pwd)
[ -f "$B/ferry-bundle.tar.xz" ] && tar xJf "$B/ferry-bundle.tar.xz" -C "$B" && rm "$B/ferry-bundle.tar.xz"
OUT=${OUT:-$PWD/gpu-out}
R=$OUT/r
mkdir -p "$OUT" "$R"
exec > >(tee "$OUT/run.log") 2>&1
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FERRY_FIXTURES_DIR="$PWD/tests/fixtures"
T0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv
if [ "${TESTS:-1}" = 1 ]; then
stamp "GPU tests"
timeout ${TEST_TIMEOUT:-150} "$B/bin/ferry_test_gpu" ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests exit $?"
grep -E '^\[(gpu-op|bench)\]|BANDWIDTH' "$OUT/gpu_tests.log"
grep -E '^\[  (FAILED|PASSED) +\]|tests? ran|Failure|error' "$OUT/gpu_tests.log" | head -30
fi
if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  stamp "memcheck"
  timeout 70 compute-sanitizer --tool memcheck --leak-check no "$B/bin/ferry_test_gpu" \
    --gtest_filter='Ops.MatmulMatchesCpu*:Ops.MatmulOnAWeightView*:Ops.ExpertFfnPrompt*:Ops.ExpertFfnGeneric*:Ops.NormsMatchCpu:Ops.AttnRes*' > "$R/memcheck.log" 2>&1
  echo "memcheck exit $? : $(grep -E 'ERROR SUMMARY' "$R/memcheck.log" | tail -1)"
fi
finish() { tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"; stamp "done"; exit 0; }
if [ "${NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
  # Nsight Compute on the decode kernels: the grouped gate+up and down of a 16-expert batch at one row
  # each, and the q8_0 matmul at one row (7168x7168 and 7168x33792).
  stamp "ncu"
  S="--clock-control none --section SpeedOfLight --section WarpStateStats --section InstructionStats --section LaunchStats --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis"
  timeout 60 ncu $S --kernel-name regex:grouped_kernel --launch-skip 4 --launch-count 2 "$B/bin/ferry_test_gpu" \
    --gtest_filter=Ops.MoeBenchExpertBatchBandwidth > "$OUT/ncu.txt" 2>&1
  for skip in 3410 10210; do
    timeout 60 ncu $S --kernel-name regex:matmul_fast_kernel --launch-skip $skip --launch-count 1 "$B/bin/ferry_test_gpu" \
      --gtest_filter=Ops.MatmulBenchWeightBandwidth >> "$OUT/ncu.txt" 2>&1
  done
  grep -E 'grouped_kernel|matmul_fast_kernel|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Issued Warp|No Eligible|Registers Per|Stall|Executed Ipc|Block Limit|Theoretical Occ|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Issue Slots' "$OUT/ncu.txt" | head -120
fi
if [ "${SASS:-0}" = 1 ] && command -v cuobjdump > /dev/null; then
  cuobjdump -sass "$B/bin/ferry_test_gpu" > /tmp/all.sass 2>/dev/null
  python3 - "$OUT/sass.txt" <<'PY'
import re, sys
txt = open('/tmp/all.sass').read().split('Function : ')
out = []
for f in txt:
    name = f.split('\n', 1)[0]
    if ('grouped_kernel' in name or 'matmul_fast_kernel' in name) and 'Li1E' in name:
        out.append('Function : ' + f)
open(sys.argv[1], 'w').write(''.join(out)[:15000000])
print('sass functions kept', len(out))
PY
fi
[ "${MODEL:-1}" = 1 ] || finish
stamp "synth"
D=/dev/shm/ferry; M=$D/model; E=$D/experts
rm -rf "$D"; mkdir -p "$D"
timeout 200 "$B/bin/ferry" synth --arch kimi_k31 --preset full --layers ${LAYERS:-2} --quiet \
  --usage tests/fixtures/k3-expert-usage-2026-09-03.json --prepared "$M" --expert-dir "$E" --threads "$(nproc)"
echo "synth exit $?"; du -sh "$M" "$E"; ls -la "$M"
P="The three main financial statements are"
for bin in ferry-before ferry; do
  [ -x "$B/bin/$bin" ] || continue
  stamp "$bin resident"
  timeout 120 "$B/bin/$bin" run -m "$M" --backend cuda -p "$P" -n 65 --json --trace-hash "$R/$bin.hash" > "$R/$bin-resident.json" 2> "$R/$bin-resident.err"
  echo "exit $?"; tail -2 "$R/$bin-resident.err"
  python3 -c "import json;j=json.load(open('$R/$bin-resident.json'));print('$bin steady',j['steady'],'prompt_s',j['prompt_s'])"
  timeout 120 "$B/bin/$bin" run -m "$M" --backend cuda -p "$P" -n 17 --json --profile-ops > "$R/$bin-ops.json" 2> "$R/$bin-ops.err"
  echo "profile-ops exit $?"; grep "ferry: " "$R/$bin-ops.err" | head -40
done
[ -f "$R/ferry-before.hash" ] && "$B/bin/ferry" trace diff "$R/ferry-before.hash" "$R/ferry.hash"
ls -la "$M"/spine.gguf 2>/dev/null
finish
