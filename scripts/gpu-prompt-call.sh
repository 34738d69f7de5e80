#!/usr/bin/env bash
# One device call for prompt-pass work (issue 14 item 2), building nothing (`bash scripts/gpu-bundle.sh` here,
# carry [".bundle"]): scripts/gpu-prompt-pass.sh (the GPU tests, memcheck over MEMCHECK_FILTER, the 1,024-token
# pass of the K3.1 slice per arm in ARMS, op profiles of PROFILE_ARMS), then, on the same slice:
#   PNCU=REGEX  Nsight Compute (full set) of the first launch of the kernels matching REGEX in that pass:
#               $OUT/pncu-details.txt and the warp stall reasons, $OUT/pncu-stalls.txt (PNCU_KEEP=1 also
#               returns the report, pncu.ncu-rep); PNCU_ENVS="- VAR=VALUE ..." once per environment
#               ("-": the default), files pncu0-*, pncu1-*, ...;
#   WAVE_STATS=1  the experts' waves of one pass (pieces, row groups, n8 tiles): $OUT/wave-stats.txt;
#   DECODE_REF=HASH  the resident decode (gpu-decode.sh, arm auto, one run) with its logits compared to HASH
#               (a file in the tree): the prompt-pass work must leave decode's bits alone.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
exec > >(tee "$OUT/prompt-call.log") 2>&1
KEEP_SLICE=1 bash "$(dirname "$0")/gpu-prompt-pass.sh" > /dev/null 2>&1
echo "gpu-prompt-pass exit $?"
grep -vE '^\[gpu-op\]' "$OUT/prompt-pass.log" |
  grep -E 'PASSED|FAILED|memcheck exit|prompt_s|identical|differ|must be|ops: busy|^  [a-z]|prompt pass of|^\[(q8tp|bench)\]' | head -120
M=/dev/shm/ferry/model
# Nsight of PNCU's kernels, once per environment in PNCU_ENVS ("-" for the default; e.g.
# PNCU_ENVS="- FERRY_MXT_PROMPT_WGMMA=1" with PNCU='wave_mma_kernel|wave_wgmma_kernel' compares the experts'
# two wave kernels): files pncu<i>-details.txt / pncu<i>-stalls.txt, i the environment's place (0 ..).
if [ -n "${PNCU:-}" ] && command -v ncu > /dev/null; then
  IDS=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(0, 1024)) for _ in range(${NPROMPT:-1024})))")
  i=0
  for pe in ${PNCU_ENVS:--}; do
    n="pncu"; [ $i -gt 0 ] || [ -n "${PNCU_ENVS:-}" ] && n="pncu$i"
    e=""; [ "$pe" = "-" ] || e="$pe"
    echo "== Nsight $n: ${e:-default environment}"
    env $e timeout 300 ncu --set full --import-source yes --kernel-name regex:"$PNCU" --launch-count "${PNCU_COUNT:-1}" -o "$OUT/$n" \
      "$B/bin/ferry" run -m "$M" --backend cuda --prompt-ids "$IDS" -n 1 --ignore-eos > "$OUT/$n-run.log" 2>&1
    echo "ncu exit $?"
    ncu -i "$OUT/$n.ncu-rep" --page details > "$OUT/$n-details.txt" 2>&1
    # The warp stall reasons (the details page gives none): cycles per issued instruction by reason.
    ncu -i "$OUT/$n.ncu-rep" --page raw 2>&1 | grep -E "average_warps_issue_stalled_[a-z_]+_per_issue_active" |
      sort -k3 -g -r | head -14 > "$OUT/$n-stalls.txt"
    cat "$OUT/$n-stalls.txt"
    # The report itself (several MB) only with PNCU_KEEP=1: the CLI's source page gave no per-line metrics.
    [ "${PNCU_KEEP:-0}" = 1 ] || rm -f "$OUT/$n.ncu-rep"
    grep -E 'Duration|Issued Warp|No Eligible|Warp Cycles Per Issued|Registers Per|Achieved Occ|Stall|stall' "$OUT/$n-details.txt" | head -30
    i=$((i + 1))
  done
fi
# WAVE_STATS=1: the experts' waves of one pass (FERRY_MOE_WAVE_STATS=1: pieces, row groups, second decodes, n8
# tiles per group), into $OUT/wave-stats.txt.
if [ "${WAVE_STATS:-0}" = 1 ]; then
  IDS=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(0, 1024)) for _ in range(${NPROMPT:-1024})))")
  FERRY_MOE_WAVE_STATS=1 timeout 120 "$B/bin/ferry" run -m "$M" --backend cuda --prompt-ids "$IDS" -n 1 --ignore-eos 2>&1 |
    grep '^\[moe-wave\]' > "$OUT/wave-stats.txt"
  echo "== expert waves of one pass (FERRY_MOE_WAVE_STATS=1):"; head -20 "$OUT/wave-stats.txt"
fi
if [ -n "${DECODE_REF:-}" ]; then
  TESTS=0 MEMCHECK=0 REUSE_SLICE=1 ARMS=auto REPS=${DECODE_REPS:-1} PROFILE=0 REF_HASH="$PWD/$DECODE_REF" bash "$(dirname "$0")/gpu-decode.sh" > /dev/null 2>&1
  echo "gpu-decode exit $?"
  grep -vE '^\[' "$OUT/decode.log" | grep -E 'decode steady|identical|must be|differ|x the floor' | head
fi
rm -rf /dev/shm/ferry
