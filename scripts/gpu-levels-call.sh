#!/usr/bin/env bash
# One device call for the prompt pass's x levels and this session's built-but-unrun switches (issue 14), building
# nothing (`MIN=1 bash scripts/gpu-bundle.sh` here, carry [".bundle"]):
#   1. gpu-decode.sh: the GPU suite (benchmarks left out; DECODE_TESTS=0 skips it), the K3.1 slice kept, decode arms
#      DECODE_ARMS (default auto) against DECODE_REF;
#   2. the prompt tests again under FERRY_MMA_LEVELS=$XLEVEL (default 1: x as hi only; 3: x's lo as E4M3 into
#      the mxfp4 experts), into $OUT/levels$XLEVEL-tests.log (LEVELS1_TESTS=0 skips it);
#   3. decode after a prompt pass at that level (its logit hashes: the reference if it becomes the default), into
#      $OUT/l$XLEVEL/ (LEVELS1_DECODE=0 skips it);
#   4. gpu-prompt-call.sh: the 1,024-token pass per arm in ARMS (REPS rounds), profiles of PROFILE_ARMS, and
#      the experts' wave statistics (WAVE_STATS=1).
# Each step has its own timeout, so a slow step leaves time for the others' logs.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
DECODE_REF=${DECODE_REF:-docs/results/2026-12-07b-e2m1/call3-decode-auto.hash}
XLEVEL=${XLEVEL:-1}
PASS_REF=${PASS_REF:-docs/results/2026-12-07b-e2m1/call3-prompt-mma.hash}
KEEP_SLICE=1 TESTS=${DECODE_TESTS:-1} TEST_FILTER='-*Bench*' MEMCHECK=0 BENCH=0 ARMS="${DECODE_ARMS:-auto}" REPS=${DECODE_REPS:-2} PROFILE=0 REF_HASH=$PWD/$DECODE_REF \
  timeout "${DECODE_TIMEOUT:-300}" bash "$(dirname "$0")/gpu-decode.sh" > /dev/null 2>&1
echo "decode exit $?"
cp "$OUT/decode.log" "$OUT/suite-decode.log"  # gpu-prompt-call.sh's own decode (DECODE_REF) writes decode.log again
grep -E '^\[  (PASSED|FAILED) +\]|tests? ran|x the floor|identical|differ|decode steady|copy rate' "$OUT/decode.log" | head -30
grep -E "x as hi only|L=1|L=$XLEVEL|E4M3" "$OUT/decode.log" | head -12
if [ "${LEVELS1_TESTS:-1}" = 1 ]; then
  FERRY_MMA_LEVELS=$XLEVEL timeout "${LEVELS1_TIMEOUT:-120}" "$B/bin/ferry_test_gpu" \
    --gtest_filter="${LEVELS1_FILTER:-*PromptPass*:*ExpertFfn*:Gpu*:*GpuHf*:*Q8Tiles*:*MxTiles*:-*Bench*}" > "$OUT/levels$XLEVEL-tests.log" 2>&1
  echo "levels-$XLEVEL tests exit $?"
  grep -E '^\[  (PASSED|FAILED) +\]|tests? ran|x as hi only|E4M3|prompt logits vs|decode logits vs|gpu-model|Failure|Which is|Expected|  Actual' "$OUT/levels$XLEVEL-tests.log" | head -60
fi
if [ "${LEVELS1_DECODE:-1}" = 1 ]; then
  mkdir -p "$OUT/l$XLEVEL"
  OUT=$OUT/l$XLEVEL FERRY_MMA_LEVELS=$XLEVEL REUSE_SLICE=1 KEEP_SLICE=1 TESTS=0 MEMCHECK=0 BENCH=0 ARMS=auto REPS=1 PROFILE=0 \
    REF_HASH=$PWD/$DECODE_REF timeout "${XDECODE_TIMEOUT:-120}" bash "$(dirname "$0")/gpu-decode.sh" > /dev/null 2>&1
  echo "levels-$XLEVEL decode exit $?"
  grep -E 'x the floor|decode steady|identical|differ|copy rate' "$OUT/l$XLEVEL/decode.log" | head
fi
REUSE_SLICE=1 TESTS=0 MEMCHECK=0 ARMS="${ARMS:-mma mma1 kdawalk2 attnsum}" REPS=${REPS:-2} PROFILE_ARMS="${PROFILE_ARMS:-mma mma1}" \
  WAVE_STATS=${WAVE_STATS:-1} REF_HASH=$PWD/$PASS_REF DECODE_REF= timeout "${PROMPT_TIMEOUT:-260}" bash "$(dirname "$0")/gpu-prompt-call.sh" 2>&1 | tail -70
rm -rf /dev/shm/ferry
