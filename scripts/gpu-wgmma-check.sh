#!/usr/bin/env bash
# The wgmma prompt kernels' GPU checks (kernels/cuda/sm90a/: the q8_0 tiles' kernel, FERRY_Q8T_PROMPT_WGMMA, and
# the experts' wave kernel, FERRY_MXT_PROMPT_WGMMA), in one device call that builds nothing
# (`MIN=1 bash scripts/gpu-bundle.sh` here, carry [".bundle"]). Each step runs in its own process, so a fault
# in one (a wrong descriptor ends the process's CUDA context) leaves the others' results:
#   1. its bits against the mma.sync kernel's (Q8Tiles test, cases "wgmma, 2 tiles a warp", "wgmma
#      overlapped"), the experts' wave kernel on wgmma against the row layout (MxTilesExperts) and the probe;
#   2. compute-sanitizer memcheck of 1;
#   3. the [q8tp] benchmark (arms "wgmma", "wgmma-ov" against "mw2") and the experts' wave benchmark;
#   4. the GPU suite without benchmarks (AllSameBitsSwitches turns the kernel on in the model tests);
#   5. with PASS=1, the 1,024-token pass of the K3.1 slice, arms ARMS (default q8wg0 q8wg2 allwg: without
#      wgmma, q8_0 on wgmma overlapped, experts too), op profiles, logit hashes against the reference
#      (gpu-prompt-pass.sh);
#   6. with DECODE=1, the resident decode against its reference logits (gpu-decode.sh).
# Results in $OUT: wgmma-bits.txt, memcheck.txt, q8tp.txt, wave.txt, gpu_tests.txt, prompt-pass.log, decode.log.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
export FERRY_FIXTURES_DIR="$PWD/tests/fixtures"
T=$B/bin/ferry_test_gpu
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
F='Ops.Q8TilesMatmulMatchesCpu*:Ops.WgmmaProbe*:Ops.MxTilesExperts*'
timeout 120 "$T" --gtest_filter="$F" 2>&1 | grep -vE '^\[gpu-op\]' > "$OUT/wgmma-bits.txt"
echo "1. bits: exit ${PIPESTATUS[0]}"; grep -E '^\[probe\]|PASSED|FAILED|Failure|wgmma' "$OUT/wgmma-bits.txt" | head -20
if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  timeout 120 compute-sanitizer --tool memcheck --leak-check no "$T" --gtest_filter="$F" > "$OUT/memcheck.txt" 2>&1
  echo "2. memcheck: exit $? : $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1)"
fi
timeout 120 "$T" --gtest_filter='*MatmulBenchQ8TilesPromptPass*' 2>&1 | grep -E '^\[q8tp\]' > "$OUT/q8tp.txt"
echo "3. benchmark:"; cat "$OUT/q8tp.txt"
timeout 120 "$T" --gtest_filter='*MoeBenchPromptPassExpertWave*' 2>&1 | grep -E '^\[bench\]' > "$OUT/wave.txt"
FERRY_MXT_WGMMA_STAGES=4 timeout 120 "$T" --gtest_filter='*MoeBenchPromptPassExpertWave*' 2>&1 | grep -E '^\[bench\]' |
  sed 's/^/(4 wgmma stages) /' >> "$OUT/wave.txt"
cat "$OUT/wave.txt"
timeout 200 "$T" --gtest_filter='-*Bench*' 2>&1 | grep -vE '^\[gpu-op\]' > "$OUT/gpu_tests.txt"
echo "4. GPU suite: $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ test' "$OUT/gpu_tests.txt" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] Ops' "$OUT/gpu_tests.txt" | head -20
if [ "${PASS:-0}" = 1 ]; then
  ARMS=${ARMS:-"q8wg0 q8wg2 allwg"}
  TESTS=0 MEMCHECK=0 ARMS="$ARMS" REPS=${REPS:-2} PROFILE_ARMS="$ARMS" \
    REF_HASH="$PWD/docs/results/2026-12-06c-h100-prompt/call4-prompt-mma.hash" bash "$(dirname "$0")/gpu-prompt-pass.sh" > /dev/null 2>&1
  echo "5. pass: exit $?"
  grep -E 'prompt pass of|identical|differ|must be|ops: busy|^  (expert_ffn|matmul q8_0 (12288|33792|7168x))' "$OUT/prompt-pass.log" | head -40
fi
# 6. with DECODE=1, the resident decode (gpu-decode.sh, arm auto) against the reference logits.
if [ "${DECODE:-0}" = 1 ]; then
  TESTS=0 MEMCHECK=0 REUSE_SLICE=1 ARMS=auto REPS=1 PROFILE=0 \
    REF_HASH="$PWD/docs/results/2026-12-06c-h100-prompt/call4-decode-auto.hash" bash "$(dirname "$0")/gpu-decode.sh" > /dev/null 2>&1
  echo "6. decode: exit $?"
  grep -vE '^\[' "$OUT/decode.log" | grep -E 'decode steady|identical|must be|differ|x the floor' | head
fi
rm -rf /dev/shm/ferry
