#!/usr/bin/env bash
# One device call for x's lo as E4M3 (FERRY_MMA_LEVELS=3, kernels/cuda/lo8_bits.cuh), building nothing (`MIN=1 bash
# scripts/gpu-bundle.sh` here, carry [".bundle"]); one call because a machine given back after 30 s idle costs a
# new start:
#   1. gpu-suite-call.sh into $OUT/suite: the GPU suite at the default (the level-3 op tests included, and since
#      2026-12-07h the DSA and router selections on the device: Ops.IndexerSelectionOnTheDevice*,
#      Ops.RouterSelectionOnTheDevice*, and the model tests' AllSameBitsSwitches with both on), the model tests at
#      levels 3 and 1, mma.sync's fp16 / E4M3 rates, memcheck over the plain level-3 kernels;
#   2. gpu-levels-call.sh into $OUT/levels with XLEVEL=3: decode at the default against DECODE_REF, decode after a
#      level-3 pass (its hashes), the 1,024-token pass per arm of ARMS (default mma lo8 lo8w2, REPS 2) against
#      PASS_REF, the op profile of lo8.
# Typical ~8 minutes. Each step has its own timeout, most important first: the suite part ~310 s at most, the
# levels part (slice and decode 110, decode after a level-3 pass 60, the passes 230); a call may run 600 s, and
# what the steps wrote comes back even if the last is cut off.
set -uo pipefail
ROOT=${OUT:-$PWD/gpu-out}
mkdir -p "$ROOT/suite" "$ROOT/levels"
T0=$(date +%s)
OUT=$ROOT/suite EXTRA_LEVELS="3 1" SUITE_TIMEOUT=${SUITE_TIMEOUT:-120} MODEL_TIMEOUT=${MODEL_TIMEOUT:-45} \
  BENCH_FILTER='Ops.MmaSyncRateBench*' BENCH_TIMEOUT=30 MEMCHECK_FILTER=${MEMCHECK_FILTER:-'Ops.PromptPassMatmulOnTensorCores*'} \
  MEMCHECK_LEVELS=3 MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-70} bash "$(dirname "$0")/gpu-suite-call.sh"
echo "== suite part done at $(( $(date +%s) - T0 )) s"
OUT=$ROOT/levels XLEVEL=3 DECODE_TESTS=0 DECODE_REPS=1 DECODE_ARMS="${DECODE_ARMS:-auto devsel}" DECODE_TIMEOUT=${DECODE_TIMEOUT:-130} LEVELS1_TESTS=0 \
  LEVELS1_DECODE=1 XDECODE_TIMEOUT=60 \
  ARMS="${ARMS:-mma lo8 lo8w2 route}" REPS=${REPS:-2} PROFILE_ARMS="${PROFILE_ARMS:-lo8}" WAVE_STATS=0 \
  PROMPT_TIMEOUT=${PROMPT_TIMEOUT:-230} PASS_REF=${PASS_REF:-docs/results/2026-12-07e-levels/call1-prompt-mma.hash} \
  DECODE_REF=${DECODE_REF:-docs/results/2026-12-07e-levels/call1-decode-auto.hash} bash "$(dirname "$0")/gpu-levels-call.sh"
echo "== done at $(( $(date +%s) - T0 )) s"
