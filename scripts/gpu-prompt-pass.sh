#!/usr/bin/env bash
# Issue 14 item 2 in one device call: prompt passes on the tensor cores (kernels/cuda/matmul_mma.cuh).
# The GPU tests (TEST_FILTER narrows them), memcheck over the mma tests, then a full-width K3.1 slice
# (LAYERS=4: 1 dense + 3 MoE layers, 2,688 experts of 17.5 MB on /dev/shm, all resident) and one
# 1,024-token prompt pass per arm, arms interleaved over REPS rounds: cores (FERRY_MMA=0, the CUDA-core
# kernels of before), mma (the defaults: x as hi + lo), mma1 (FERRY_MMA_LEVELS=1: hi only), mma2
# (FERRY_MMA_LEVELS=2: hi + lo, the default's bits), lo8 (FERRY_MMA_LEVELS=3: the experts' x lo as E4M3), mmaw2
# (FERRY_MMA_GROUP_MW=2: 256-row expert tiles), rowq8 (FERRY_Q8T=0: q8_0 spine weights in their row layout,
# the prompt kernel of matmul_mma.cuh instead of the q8_0 tiles of matmul_q8t.cuh). ARMS picks them (default cores mma mma1). Each arm also runs
# with --profile-ops once. Prints prompt_s per arm and the ratio to the compute target. When the bundle
# holds ferry-before.xz (the binary before this work), the resident decode runs with both binaries,
# the new one with FERRY_MMA=0 (its prompt pass on the CUDA cores, as before): steady rate and logit
# hashes (ferry trace diff: identical = the CUDA-core path's bits did not move), and with the default.
# Builds nothing: `bash scripts/gpu-bundle.sh` here, carry [".bundle"], `bash scripts/gpu-prompt-pass.sh`.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
R=$OUT/prompt-pass
mkdir -p "$R"
exec > >(tee "$OUT/prompt-pass.log") 2>&1
export FERRY_FIXTURES_DIR="$PWD/tests/fixtures"
T0=$(date +%s); stamp() { echo "== [$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv
if [ "${TESTS:-1}" = 1 ]; then
  stamp "GPU tests ${TEST_FILTER:-all}"
  timeout ${TEST_TIMEOUT:-200} "$B/bin/ferry_test_gpu" ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} > "$R/gpu_tests.log" 2>&1
  rc=$?; echo "gpu tests exit $rc"
  # A crash or a timeout leaves no summary line: say which test was running and how it ended.
  if [ $rc != 0 ] && ! grep -qE '^\[  (PASSED|FAILED) +\]' "$R/gpu_tests.log"; then
    echo "no summary: the last test started and the log's end:"; grep -E '^\[ RUN' "$R/gpu_tests.log" | tail -1; tail -3 "$R/gpu_tests.log"
  fi
  grep -E '^\[gpu-op\] (mma e \[118|mma .*1024|mma prompt|mma q8_0 prompt|mma K3|rmsnorm|l2norm|add_rows|kda|block of)' "$R/gpu_tests.log" | head -60
  grep -E '^\[  (FAILED|PASSED) +\]|tests? ran|Failure' "$R/gpu_tests.log" | head -30
  grep -E '^\[(q8tp|bench)\]' "$R/gpu_tests.log" | head -60  # the kernel benchmarks, when TEST_FILTER takes them
fi
if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  stamp "memcheck"
  timeout 90 compute-sanitizer --tool memcheck --leak-check no "$B/bin/ferry_test_gpu" \
    --gtest_filter="${MEMCHECK_FILTER:-Ops.PromptPass*:Ops.NormsOfHeadSized*:Ops.AddRows*:Ops.KdaChunked*}" > "$R/memcheck.log" 2>&1
  echo "memcheck exit $? : $(grep -E 'ERROR SUMMARY' "$R/memcheck.log" | tail -1)"
fi
[ "${MODEL:-1}" = 1 ] || exit 0
stamp "synth"
D=/dev/shm/ferry; M=$D/model; E=$D/experts
slice_for_script "$M" "$E"
IDS=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(0, 1024)) for _ in range(${NPROMPT:-1024})))")
arm_env() { case $1 in cores) echo FERRY_MMA=0;; mma) echo FERRY_MMA=1;; mma1) echo FERRY_MMA_LEVELS=1;; mma2) echo FERRY_MMA_LEVELS=2;; mmaw2) echo FERRY_MMA_GROUP_MW=2;; rowq8) echo FERRY_Q8T=0;;
  mmaw2l2) echo FERRY_MMA_GROUP_MW=2 FERRY_MMA_LEVELS=2;;  # mmaw2 with x as hi + lo (the bits of mma2)
  mmaw2l1) echo FERRY_MMA_GROUP_MW=2 FERRY_MMA_LEVELS=1;;  # mmaw2 with x as hi only (the bits of mma1)
  lo8) echo FERRY_MMA_LEVELS=3;;  # x's lo as E4M3 into the mxfp4 experts (lo8_bits.cuh; new bits), q8_0 as mma
  lo8w2) echo FERRY_MMA_LEVELS=3 FERRY_MMA_GROUP_MW=2;;  # lo8 with 256-row expert tiles (the bits of lo8)
  lo8w3) echo FERRY_MMA_LEVELS=3 FERRY_MOE_WAVE_BLOCKS=3;;  # lo8 with the wave kernel at 3 blocks a SM (the bits of lo8)
  rowmx) echo FERRY_MXT=0;;  # rowmx: resident experts in rows, not mxfp4 tiles (same bits)
  wave3) echo FERRY_MOE_WAVE_BLOCKS=3;;  # the experts' wave kernel compiled for 3 blocks a SM (same bits)
  wave64) echo FERRY_MOE_WAVE_BN=64;;  # the experts' waves in row groups of 64 (same bits)
  stages4|stages5|stages6) echo FERRY_MOE_WAVE_STAGES=${1#stages};;  # the experts' wave kernel with 4-6 copy stages (same bits)
  route) echo FERRY_DEVICE_ROUTE=1;;  # the router's selection on the device, ids and weights downloaded (same bits)
  lo8route) echo FERRY_MMA_LEVELS=3 FERRY_DEVICE_ROUTE=1;;  # lo8 with it (the bits of lo8)
  hroute) echo FERRY_DEVICE_ROUTE=0;;  # the router's selection on the host (same bits; the default before 2026-12-07i)
  dsel) echo FERRY_DEVICE_SELECT=1;;  # the DSA selection on the device (same bits; the default since 2026-12-07i; selects only past 2,048 tokens: NPROMPT)
  nodsel) echo FERRY_DEVICE_SELECT=0;;  # on the host from downloaded scores (same bits)
  asplit) echo FERRY_ATTN_SPLIT=1;;  # attention of queries with 256 keys or more split over keys and columns (same bits)
  kdaold) echo FERRY_KDA_ILP=0;;  # the chunked delta rule's first version (same bits)
  kdanocl) echo FERRY_KDA_CLUSTER=0;;  # its loads in flight without the head's cluster (same bits)
  noattnq) echo FERRY_ATTN_MULTI=0;;  # dense attention of a prompt pass with a block per (query, head) (same bits)
  attnq16) echo FERRY_ATTN_MULTI=16;;  # 16 queries per block (same bits)
  attnreg) echo FERRY_ATTN_REG=1;;  # 8 queries per block, their rows in registers, the grid head-major (same bits)
  noattnreg) echo FERRY_ATTN_REG=0;;  # the 8-query blocks with their rows in shared memory (same bits)
  kdablk) echo FERRY_KDA_BLOCK=1;;  # the delta rule's u / o and state update in register blocks (same bits; the default)
  kdapre) echo FERRY_KDA_PREPASS=1;;  # the chunks' state-free parts in a prepass over (chunk, head), then the walk (same bits; the default)
  nokdapre) echo FERRY_KDA_PREPASS=0;;  # without the prepass: the walk computes them chunk by chunk
  kdawalk2) echo FERRY_KDA_WALK2=1;;  # the prepass's walk in blocks of 8 warps, two a SM (same bits)
  attnfold) echo FERRY_ATTN_REG=2;;  # attnreg with a round's 16 scores folded through shared memory (same bits; the default)
  attnsum) echo FERRY_ATTN_REG=3;;  # attnfold with each query's sum of p taken once (same bits)
  kdanoblk) echo FERRY_KDA_BLOCK=0;;  # without them
  q8mw2) echo FERRY_Q8T_PROMPT_MW=2;;  # the q8_0 tiles' prompt kernel with two 16-row tiles a warp everywhere (same bits)
  q8mw1) echo FERRY_Q8T_PROMPT_MW=1;;  # with one everywhere (the default picks 2 where the call fills the SMs)
  q8swz) echo FERRY_Q8T_PROMPT_SWZ=1;;  # one tile a warp, x swizzled, two blocks a SM (same bits; measured slower)
  q8wg) echo FERRY_Q8T_PROMPT_WGMMA=1;;  # the q8_0 tiles' prompt kernel (two tiles a warp) on wgmma without overlap (same bits)
  q8wg0) echo FERRY_Q8T_PROMPT_WGMMA=0;;  # without wgmma: the mma.sync prompt kernels (same bits)
  q8wg2) echo FERRY_Q8T_PROMPT_WGMMA=2;;  # on wgmma with the two tiles' batches overlapped (same bits; the default on H100 / H200)
  mxwg) echo FERRY_MXT_PROMPT_WGMMA=1;;  # the routed experts' wave kernel on wgmma (same bits; off: slower in the pass)
  mxwg2) echo FERRY_MXT_PROMPT_WGMMA=1 FERRY_MXT_WGMMA_MIN_NT=2;;  # it, items of 1 n8 tile on mma.sync (same bits)
  mxwg3) echo FERRY_MXT_PROMPT_WGMMA=1 FERRY_MXT_WGMMA_MIN_NT=3;;  # items of 1-2 n8 tiles on mma.sync (same bits)
  allwg) echo FERRY_Q8T_PROMPT_WGMMA=2 FERRY_MXT_PROMPT_WGMMA=1;;  # both on wgmma, the q8_0 one overlapped
  nowave) echo FERRY_MOE_WAVE=0;;  # the routed experts' grouped launches one per table, not one per wave (same bits)
  notile) echo FERRY_F32_TILE=0;;  # many-row f32 matmuls (routers) on the generic kernel (same bits)
  f32pipe) echo FERRY_F32_TILE=2;;  # their tile kernel with two stages pipelined by cp.async (same bits; the default)
  f32one) echo FERRY_F32_TILE=1;;  # one stage at a time
  noconv) echo FERRY_CONV_CHUNKS=0;;  # prompt convolutions one walk per channel (same bits)
  lazy) echo CUDA_MODULE_LOADING=LAZY;;  # kernels loaded at their first launch (the runtime's default; ferry sets EAGER)
  esac; }
# Flags of an arm (the engine options, not the environment): x11 / x22 --prompt-x-bits 11 / 22 (x11 must give
# mma1's bits; x22 mma2's, the default's).
arm_flags() { case $1 in x11) echo --prompt-x-bits 11;; x22) echo --prompt-x-bits 22;; esac; }
# The binary of an arm: bin/ferry, or for base an older build (gpu-bundle.sh BASE=) as bin/ferry-base.
arm_bin() { if [ "$1" = base ]; then echo "$B/bin/ferry-base"; else echo "$B/bin/ferry"; fi; }
ARMS=${ARMS:-"cores mma mma1"}
for rep in $(seq 1 ${REPS:-2}); do
  for arm in $ARMS; do
    stamp "$arm round $rep"
    env $(arm_env $arm) timeout 150 "$(arm_bin $arm)" run -m "$M" --backend cuda --prompt-ids "$IDS" -n 4 --ignore-eos \
      $(arm_flags $arm) --json --trace-hash "$R/$arm-$rep.hash" > "$R/$arm-$rep.json" 2> "$R/$arm-$rep.err"
    echo "exit $?"; tail -1 "$R/$arm-$rep.err"
    python3 -c "import json;j=json.load(open('$R/$arm-$rep.json'));print('$arm','prompt_s',j['prompt_s'],'load_s',j.get('load_s'),'tokens',j['prompt_tokens'],'ids',j['ids'])"
  done
done
# Arms of the same bits as mma (the default): every logit hash must be identical. The reference arm is mma
# when it ran, else the first arm of ARMS (every arm named below keeps mma's bits).
REFARM=mma; [ -f "$R/mma-1.hash" ] || REFARM=${ARMS%% *}
for a in base q8wg q8wg0 q8wg2 mxwg mxwg2 mxwg3 allwg rowmx kdaold kdanocl notile noattnq noconv attnq16 attnreg kdapre kdablk kdanoblk nokdapre kdawalk2 attnfold attnsum noattnreg f32pipe f32one q8mw2 q8mw1 q8swz nowave lazy wave3 wave64 stages4 stages5 stages6 mmaw2 route hroute dsel nodsel asplit; do
  [ "$a" != "$REFARM" ] && [ -f "$R/$a-1.hash" ] && [ -f "$R/$REFARM-1.hash" ] &&
    echo "$REFARM vs $a ($(arm_env $a)): must be identical:" && "$B/bin/ferry" trace diff "$R/$REFARM-1.hash" "$R/$a-1.hash" | tail -3
done
for a in mmaw2l1 x11; do  # x as hi only: the bits of mma1
  [ -f "$R/mma1-1.hash" ] && [ -f "$R/$a-1.hash" ] && echo "mma1 vs $a: must be identical:" &&
    "$B/bin/ferry" trace diff "$R/mma1-1.hash" "$R/$a-1.hash" | tail -3
done
for a in lo8w2 lo8w3 lo8route; do  # x's lo as E4M3: the bits of lo8
  [ -f "$R/lo8-1.hash" ] && [ -f "$R/$a-1.hash" ] && echo "lo8 vs $a: must be identical:" &&
    "$B/bin/ferry" trace diff "$R/lo8-1.hash" "$R/$a-1.hash" | tail -3
done
# LO8_REF_HASH: a lo8 pass's reference (once one is kept).
[ -n "${LO8_REF_HASH:-}" ] && [ -f "$R/lo8-1.hash" ] && echo "lo8 vs $LO8_REF_HASH: must be identical:" &&
  "$B/bin/ferry" trace diff "$LO8_REF_HASH" "$R/lo8-1.hash" | tail -3
[ -f "$R/mma2-1.hash" ] && [ -f "$R/x22-1.hash" ] && echo "mma2 vs x22 (--prompt-x-bits 22): must be identical:" &&
  "$B/bin/ferry" trace diff "$R/mma2-1.hash" "$R/x22-1.hash" | tail -3
[ -n "${REF_HASH:-}" ] && [ -f "$R/$REFARM-1.hash" ] && echo "$REFARM vs $REF_HASH: must be identical:" &&
  "$B/bin/ferry" trace diff "$REF_HASH" "$R/$REFARM-1.hash" | tail -3
# REF2_HASH: the two-level pass's reference (x as hi + lo), for the arms mma2 / x22 / mmaw2l2.
for a in mma2 x22 mmaw2l2; do
  [ -n "${REF2_HASH:-}" ] && [ -f "$R/$a-1.hash" ] && echo "$a vs $REF2_HASH: must be identical:" &&
    "$B/bin/ferry" trace diff "$REF2_HASH" "$R/$a-1.hash" | tail -3
done
for arm in ${PROFILE_ARMS:-$ARMS}; do
  [ "${PROFILE:-1}" = 1 ] || continue
  env $(arm_env $arm) timeout 150 "$(arm_bin $arm)" run -m "$M" --backend cuda --prompt-ids "$IDS" -n 1 --ignore-eos \
    --json --profile-ops > "$R/$arm-ops.json" 2> "$R/$arm-ops.err"
  echo "$arm profile-ops exit $?"
  python3 -c "
import json
j=json.load(open('$R/$arm-ops.json')); p=j['op_profile']
print('$arm ops: busy %.1f ms, span %.1f ms, prompt_s %.4f' % (p['busy_ms'], p['span_ms'], j['prompt_s']))
for k, v in sorted(p['ops'].items(), key=lambda kv: -kv[1]['ms'])[:22]: print('  %-44s %5d %9.2f ms' % (k, v['calls'], v['ms']))"
done
if [ -f "$B/ferry-before.xz" ] || [ -x "$B/bin/ferry-before" ]; then
  [ -f "$B/ferry-before.xz" ] && xz -dc "$B/ferry-before.xz" > "$B/bin/ferry-before" && chmod +x "$B/bin/ferry-before" && rm "$B/ferry-before.xz"
  for run in ferry-before:0 ferry:0 ferry:1; do
    bin=${run%:*}; mma=${run#*:}; name=$bin-mma$mma
    stamp "$name resident decode"
    FERRY_MMA=$mma timeout 150 "$B/bin/$bin" run -m "$M" --backend cuda -p "The three main financial statements are" -n 65 \
      --json --trace-hash "$R/$name.hash" > "$R/$name-decode.json" 2> "$R/$name-decode.err"
    echo "exit $?"
    python3 -c "import json;j=json.load(open('$R/$name-decode.json'));print('$name decode steady',j['steady'],'tok/s, prompt_s',j['prompt_s'],'ids',j['ids'][:12])"
  done
  echo "before vs after with FERRY_MMA=0 (the CUDA-core path):"
  "$B/bin/ferry" trace diff "$R/ferry-before-mma0.hash" "$R/ferry-mma0.hash" | tail -3
fi
stamp "summary"
python3 - "$R" $ARMS <<'PY' | tee "$OUT/prompt-pass.txt"
import json, sys, glob, statistics
r, arms = sys.argv[1], sys.argv[2:]
# FLOPs of the pass (matmuls only): 2 x weights each token multiplies, from --profile-ops' weight shapes
# is not available here; use the slice's count (docs/BENCHMARKS.md): spine 2.95 G + 3 x 16 x 33.03 M
# expert weights per token.
per_tok = 2 * (2.95e9 + 3 * 16 * 33.03e6)
for a in arms:
    ts = [json.load(open(f))['prompt_s'] for f in sorted(glob.glob(f"{r}/{a}-[0-9]*.json"))]
    if not ts: continue
    n = json.load(open(glob.glob(f"{r}/{a}-1.json")[0]))['prompt_tokens']
    best = min(ts)
    tf = per_tok * n / best / 1e12
    print(f"{a}: prompt pass of {n} tokens: {' '.join(f'{t*1e3:.1f}' for t in ts)} ms; best {best*1e3:.1f} ms = "
          f"{tf:.1f} TFLOP/s = {tf/989*100:.1f} % of 989 dense fp16/bf16 TFLOP/s (target 40 %)")
PY
[ "${KEEP_SLICE:-0}" = 1 ] || rm -rf "$D"
tar czf "$OUT/prompt-pass.tgz" -C "$R" . && rm -rf "$R"  # one file back (the device call returns few)
stamp done
