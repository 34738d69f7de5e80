#!/usr/bin/env bash
# One device call, building nothing (`MIN=1 bash scripts/gpu-bundle.sh` here, carry [".bundle"]): the model tests
# (Hugging Face families and K3 tiny) at each prompt x level, their whole logs kept in $OUT/models-l<levels>.log,
# then gpu-prompt-call.sh (ARMS, REPS, PROFILE_ARMS, PASS_REF / REF2_HASH as there).
# Why: the default of one level (x as hi only) failed 5 GpuHf tests in the suite whose log did not come back.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
for lv in ${MODEL_LEVELS:-1 2}; do
  FERRY_MMA_LEVELS=$lv timeout "${MODEL_TIMEOUT:-120}" "$B/bin/ferry_test_gpu" \
    --gtest_filter="${MODEL_FILTER:-Families/GpuHf.*:GpuK3.*}" > "$OUT/models-l$lv.log" 2>&1
  echo "levels $lv: exit $?"
  grep -E '^\[  (PASSED|FAILED) +\]|gpu-model|Failure|Expected|Which is|Value of|  Actual|tests? ran' "$OUT/models-l$lv.log" | head -50
done
[ -n "${ARMS:-}" ] || exit 0
PASS_REF=${PASS_REF:-docs/results/2026-12-07e-levels/call1-prompt-mma1.hash}
TESTS=0 MEMCHECK=0 REF_HASH=$PWD/$PASS_REF WAVE_STATS=0 timeout "${PROMPT_TIMEOUT:-300}" \
  bash "$(dirname "$0")/gpu-prompt-call.sh" 2>&1 | tail -60
rm -rf /dev/shm/ferry
