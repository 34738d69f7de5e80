#!/usr/bin/env bash
# One device call for the router's and the DSA's selections on the device (issue 14 item 1), building nothing
# (`MIN=1 bash scripts/gpu-bundle.sh` here, carry [".bundle"]). Steps, most important first, each with its own
# timeout:
#   1. the selection tests and the model tests at the new defaults (device route for prompt passes):
#      $ROOT/tests.log;
#   2. decode of the short prompt, arms DEC_ARMS (default auto route: the default's host selection for one row
#      against the device's), against DECODE_REF, and with STEPNCU=1 every kernel's time in 3 steps of auto
#      (give DEC_TIMEOUT=330: Nsight took over 100 s on 2026-12-07i): $ROOT/dec/;
#   3. decode after a NPROMPT_LONG-token prompt (default 3,000: every step of the DSA layer selects 2,048 of its
#      keys), arms LONG_ARMS (default auto nodsel: the device's selection, the default since 2026-12-07i, against
#      the host's): $ROOT/dec3k/;
#   4. the 1,024-token pass, arms PASS_ARMS (default mma hroute: the device route, now the default, against the
#      host's), against PASS_REF: $ROOT/pass/;
#   5. a NPROMPT_LONG-token pass, arms LONG_PASS_ARMS (default mma nodsel): $ROOT/pass3k/.
# TESTS_FILTER=- / LONG_ARMS=- / PASS_ARMS=- / LONG_PASS_ARMS=- skip steps 1 / 3 / 4 / 5 (step 2 makes the slice the
# others reuse: keep it, DEC_ARMS=auto at least). Everything goes back as one archive, $OUT/select.tgz (the device tool returns at most 8 files), with the
# summary lines in $OUT/summary.txt.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
ROOT=$OUT/select
mkdir -p "$ROOT"/{dec,dec3k,pass,pass3k}
S=$(dirname "$0")
T0=$(date +%s)
exec > >(tee "$OUT/summary.txt") 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
if [ "${TESTS_FILTER:-}" != - ]; then
  timeout "${TESTS_TIMEOUT:-150}" "$B/bin/ferry_test_gpu" \
    --gtest_filter="${TESTS_FILTER:-Ops.RouterSelection*:Ops.IndexerSelection*:Ops.IndexerTopk*:*GpuHf*:GpuK3*}" > "$ROOT/tests.log" 2>&1
  echo "tests exit $? at $(( $(date +%s) - T0 )) s"
  grep -E '^\[  (PASSED|FAILED) +\]|tests? ran|Failure|same-bits|cpu vs cuda' "$ROOT/tests.log" | head -30
fi
DECODE_REF=${DECODE_REF:-docs/results/2026-12-07i-lo8/call1-decode-auto.hash}
PASS_REF=${PASS_REF:-docs/results/2026-12-07i-lo8/call1-prompt-mma.hash}
OUT=$ROOT/dec KEEP_SLICE=1 TESTS=0 MEMCHECK=0 BENCH=0 ARMS="${DEC_ARMS:-auto route}" REPS=${DEC_REPS:-1} PROFILE=0 \
  STEPNCU=${STEPNCU:-0} REF_HASH=$PWD/$DECODE_REF timeout "${DEC_TIMEOUT:-150}" bash "$S/gpu-decode.sh" > /dev/null 2>&1
echo "decode exit $? at $(( $(date +%s) - T0 )) s"
grep -E 'x the floor|identical|differ|must be|copy rate|kernels|step' "$ROOT/dec/decode.log" | head -24
if [ "${LONG_ARMS:-}" != - ]; then
  OUT=$ROOT/dec3k NPROMPT=${NPROMPT_LONG:-3000} REUSE_SLICE=1 KEEP_SLICE=1 TESTS=0 MEMCHECK=0 BENCH=0 \
    ARMS="${LONG_ARMS:-auto nodsel}" REPS=${LONG_REPS:-1} PROFILE=0 timeout "${LONG_TIMEOUT:-120}" bash "$S/gpu-decode.sh" > /dev/null 2>&1
  echo "long decode exit $? at $(( $(date +%s) - T0 )) s"
  grep -E 'x the floor|identical|differ|must be|prompt_s' "$ROOT/dec3k/decode.log" | head -12
fi
if [ "${PASS_ARMS:-}" != - ]; then
  OUT=$ROOT/pass REUSE_SLICE=1 KEEP_SLICE=1 TESTS=0 MEMCHECK=0 ARMS="${PASS_ARMS:-mma hroute}" REPS=${PASS_REPS:-1} \
    PROFILE=0 REF_HASH=$PWD/$PASS_REF timeout "${PASS_TIMEOUT:-150}" bash "$S/gpu-prompt-pass.sh" > /dev/null 2>&1
  echo "pass exit $? at $(( $(date +%s) - T0 )) s"
  grep -E 'identical|differ|must be|prompt pass of' "$ROOT/pass/prompt-pass.log" | head -12
fi
if [ "${LONG_PASS_ARMS:-}" != - ]; then
  OUT=$ROOT/pass3k NPROMPT=${NPROMPT_LONG:-3000} REUSE_SLICE=1 TESTS=0 MEMCHECK=0 ARMS="${LONG_PASS_ARMS:-mma nodsel}" \
    REPS=${LONG_PASS_REPS:-1} PROFILE=0 timeout "${LONG_PASS_TIMEOUT:-150}" bash "$S/gpu-prompt-pass.sh" > /dev/null 2>&1
  echo "long pass exit $? at $(( $(date +%s) - T0 )) s"
  grep -E 'identical|differ|must be|prompt pass of|prompt_s' "$ROOT/pass3k/prompt-pass.log" | head -12
fi
rm -rf /dev/shm/ferry
tar czf "$OUT/select.tgz" -C "$OUT" select && rm -rf "$ROOT"
echo "== done at $(( $(date +%s) - T0 )) s"
