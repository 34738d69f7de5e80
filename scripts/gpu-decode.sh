#!/usr/bin/env bash
# Issue 14 item 1 in one device call: decode steps and verify blocks on the tensor cores
# (kernels/cuda/matmul_dec.cuh) against the CUDA-core kernels of before (FERRY_DEC_MMA=0).
# 1. The GPU tests (TEST_FILTER narrows them, e.g. 'Ops.Decode*:Ops.ExpertFfn*:*GpuHf*:*GpuK3*': the fixture
#    suites are parameterized, their names carry a prefix; TESTS=0 skips) and memcheck over the decode tests.
# 2. The kernel benchmarks with both arms in this call (BENCH=0 skips): plain matmuls at 1..16 rows
#    (MatmulBenchWeightBandwidth) and 16-expert batches (MoeBenchExpertBatchBandwidth).
# 3. A full-width K3.1 slice (LAYERS=4: 1 dense + 3 MoE layers, 2,688 experts of 17.5 MB on /dev/shm, all
#    resident): the resident decode (-n 65) per arm, arms interleaved over REPS rounds, then each arm with
#    --profile-ops (-n 17); the steady rate against the HBM floor of the step (docs/BENCHMARKS.md: the
#    4-layer slice reads 3.977 GB per step; FLOOR_GB overrides) over the device copy rate measured here.
# Builds nothing: `bash scripts/gpu-bundle.sh` here, carry [".bundle"], `bash scripts/gpu-decode.sh`.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
R=$OUT/decode
mkdir -p "$R"
exec > >(tee "$OUT/decode.log") 2>&1
export FERRY_FIXTURES_DIR="$PWD/tests/fixtures"
T0=$(date +%s); stamp() { echo "== [$(($(date +%s) - T0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv
if [ "${TESTS:-1}" = 1 ]; then
  stamp "GPU tests ${TEST_FILTER:-all}"
  timeout ${TEST_TIMEOUT:-240} "$B/bin/ferry_test_gpu" ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} > "$R/gpu_tests.log" 2>&1
  rc=$?; echo "gpu tests exit $rc"
  # A crash or a timeout leaves no summary line: say which test was running and how it ended.
  if [ $rc != 0 ] && ! grep -qE '^\[  (PASSED|FAILED) +\]' "$R/gpu_tests.log"; then
    echo "no summary: the last test started and the log's end:"; grep -E '^\[ RUN' "$R/gpu_tests.log" | tail -1; tail -3 "$R/gpu_tests.log"
  fi
  grep -E '^\[gpu-op\] (dec |K3|q8_0 5|mxfp4 16|.*block vs plain|.*vs cuda sequence)' "$R/gpu_tests.log" | head -70
  grep -E '^\[  (FAILED|PASSED) +\]|tests? ran|Failure' "$R/gpu_tests.log" | head -30
fi
if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  stamp "memcheck"
  timeout 120 compute-sanitizer --tool memcheck --leak-check no "$B/bin/ferry_test_gpu" \
    --gtest_filter="${MEMCHECK_FILTER:-Ops.Decode*:Ops.ExpertFfnDecode*:Ops.ExpertFfnK3*:Ops.MatmulSixteen*:Ops.SplitK*:Ops.AttnRes*:Ops.MatmulMatchesCpu*}" > "$R/memcheck.log" 2>&1
  echo "memcheck exit $? : $(grep -E 'ERROR SUMMARY' "$R/memcheck.log" | tail -1)"
fi
# RACECHECK=1: compute-sanitizer's racecheck over MEMCHECK_FILTER's tests (shared-memory hazards of the
# cluster and mbarrier kernels). SASS='regex': the SASS of bin/ferry's kernels whose mangled names match,
# into decode/sass.txt (cuobjdump of the GPU machine: this machine's cannot read CUDA 13 cubins).
if [ "${RACECHECK:-0}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  stamp "racecheck"
  timeout 150 compute-sanitizer --tool racecheck "$B/bin/ferry_test_gpu" \
    --gtest_filter="${MEMCHECK_FILTER:-Ops.RowNormCluster*:Ops.AddAttnRes*:Ops.F32OneRow*}" > "$R/racecheck.log" 2>&1
  echo "racecheck exit $? : $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$R/racecheck.log" | tail -1)"
fi
if [ -n "${SASS:-}" ] && command -v cuobjdump > /dev/null; then
  stamp "sass $SASS"
  cuobjdump -sass "$B/bin/ferry" 2> /dev/null | python3 -c '
import re, sys
pat, keep = re.compile(sys.argv[1]), False
for line in sys.stdin:
    m = re.match(r"\s*Function : (\S+)", line)
    if m: keep = bool(pat.search(m.group(1)))
    if keep: sys.stdout.write(line)' "$SASS" > "$R/sass.txt"
  grep -c . "$R/sass.txt"; grep -E 'Function :' "$R/sass.txt"
fi
# Arms: cores (FERRY_DEC_MMA=0: the CUDA-core kernels), auto (the default: the tensor-core decode kernels for
# the weights where they were measured faster), dec (FERRY_DEC_MMA=1: the tensor-core decode kernels for all),
# dec4 / dec1 (FERRY_DEC_KB: their stage width capped at 512 / 128 columns; speed only, same bits as dec),
# decnp (FERRY_DEC_PDL=0: without programmatic dependent launch; same bits), base (bin/ferry-base: the build
# gpu-bundle.sh was given as BASE, e.g. main before this branch), nosplit (FERRY_KSPLIT=0:
# no split of K in the q8_0 decode matmuls, splitk.cuh; other bits), rowq8 (FERRY_Q8T=0: q8_0 spine weights
# left in their row layout, run by the row-layout kernels instead of the q8_0 tiles of matmul_q8t.cuh), group
# (FERRY_Q8T_GROUP=1, the default since 2026-12-02: Backend::matmul_group prepares x once for the projections
# of one input; same bits), nogroup (FERRY_Q8T_GROUP=0: x prepared for each matmul), rowmx (FERRY_MXT=0:
# resident experts left in their row layout instead of the mxfp4 tiles of matmul_mxt.cuh; same bits),
# onelaunch (FERRY_Q8T_ONE_LAUNCH=1: a matmul group's unsplit q8_0 tiles in one launch; same bits),
# row1 (FERRY_F32_ROW1=1: one-row f32 matmuls, the routers and MLA's heads, on their own kernel; same bits),
# early (FERRY_Q8T_EARLY=1: q8_0-tiles kernels let the next dependent launch start as their last block is
# resident; same bits), pdl (FERRY_PDL=1: the small kernels launched as programmatic dependents,
# kernels/cuda/switches.hpp; same bits), ilp (FERRY_ATTN_ILP=1: attention and DSA indexer kernels with more
# keys / columns / heads per warp at once; same bits), next (onelaunch, row1, early, pdl and ilp together),
# nopdl (FERRY_PDL=0: the small kernels launched plain; the default since 2026-12-02 is programmatic),
# pdl-NAMES (FERRY_PDL=1 for the small kernels whose names contain one of NAMES, a+b+...; pdl--NAMES: all
# but those: to find which kernel's programmatic launch changes a result), gsplit (FERRY_Q8T_GROUP_SPLIT=1: a
# group's split q8_0 tiles in the group's one launch, not a launch each; measured no faster; same bits), xsmem
# (FERRY_MXT_XSMEM=1: the expert down projections' x staged in shared memory per block; same bits), nofuse
# (FERRY_FUSE=0: the fused ops of 2026-12-03 one by one, as before: norms that prepare the decode matmuls'
# x, AttnRes + norm, KDA's q/k norms and convolutions; same bits), nokreg (FERRY_KDA_REG=0: the decode delta
# rule's state in shared memory instead of registers; same bits), gate (FERRY_FUSE_GATE=1: the gated
# activations and their preparation in one launch too, off by default; same bits), noilp / noadd
# (FERRY_ATTN_ILP=0 / FERRY_FUSE_ADD=0: on by default since 2026-12-06), nogsplit (FERRY_Q8T_GROUP_SPLIT=0:
# the inverse of gsplit, on by default since 2026-12-06), stream / stream2 (FERRY_Q8T_STREAM=1 / 2: the
# q8_0 tiles' stream split for the one-wave matrices / also those of 528 tiles and more whose tiles are not whole
# waves; other last bits), mxsetN
# (FERRY_MXT_SET=N: N units a load set in the experts' one-row kernel, 2 / 8 / 14; same bits), dsetN
# (FERRY_MXT_SET_DOWN=N: the same for the down projections only), lean / push / bulk (FERRY_MXT_LEAN=1: that
# kernel's lean loop; FERRY_ROW_PUSH=1: the row norms' cluster kernel exchanging its sums by pushes;
# FERRY_F32_ROW_BULK=1: the one-row f32 kernel's rows bulk-copied into shared memory; same bits; all three on by
# default since 2026-12-07, so these arms, and lpb / pl / pb, their combinations, now equal auto), old (the three
# off: the default before), nolean / nobulk (one of them off), leandown (FERRY_MXT_LEAN=2: the lean loop for the
# down projections only), all (lean, push, bulk and stream), norowreg (FERRY_ROW_REG=0: AttnRes's inputs loaded
# in each pass instead of once into registers, on by default since 2026-12-06; same bits). The arm base runs bin/ferry-base with BASE_ENV's
# switches.
arm_env() {
  case $1 in
    cores) echo FERRY_DEC_MMA=0;; auto) echo FERRY_DEC_MMA=auto;; dec) echo FERRY_DEC_MMA=1;; dec4) echo FERRY_DEC_MMA=1 FERRY_DEC_KB=4;;
    dec1) echo FERRY_DEC_MMA=1 FERRY_DEC_KB=1;; decnp) echo FERRY_DEC_MMA=1 FERRY_DEC_PDL=0;;
    nosplit) echo FERRY_KSPLIT=0;; base) echo FERRY_ARM=base ${BASE_ENV:-};; rowq8) echo FERRY_Q8T=0;; group) echo FERRY_Q8T_GROUP=1;; nogroup) echo FERRY_Q8T_GROUP=0;;
    rowmx) echo FERRY_MXT=0;; onelaunch) echo FERRY_Q8T_ONE_LAUNCH=1;; row1) echo FERRY_F32_ROW1=1;;
    early) echo FERRY_Q8T_EARLY=1;; pdl) echo FERRY_PDL=1;; ilp) echo FERRY_ATTN_ILP=1;;
    next) echo "FERRY_Q8T_ONE_LAUNCH=1 FERRY_F32_ROW1=1 FERRY_Q8T_EARLY=1 FERRY_PDL=1 FERRY_ATTN_ILP=1";;
    nopdl) echo FERRY_PDL=0;; gsplit) echo FERRY_Q8T_GROUP_SPLIT=1;; xsmem) echo FERRY_MXT_XSMEM=1;;
    nofuse) echo FERRY_FUSE=0;; gate) echo FERRY_FUSE_GATE=1;; nokreg) echo FERRY_KDA_REG=0;; nocluster) echo FERRY_ROW_CLUSTER=0;; add) echo FERRY_FUSE_ADD=1;; gateadd) echo FERRY_FUSE_GATE=1 FERRY_FUSE_ADD=1;;
    noilp) echo FERRY_ATTN_ILP=0;; noadd) echo FERRY_FUSE_ADD=0;;
    nogsplit) echo FERRY_Q8T_GROUP_SPLIT=0;; norowreg) echo FERRY_ROW_REG=0;; push) echo FERRY_ROW_PUSH=1;; bulk) echo FERRY_F32_ROW_BULK=1;; all) echo FERRY_MXT_LEAN=1 FERRY_ROW_PUSH=1 FERRY_F32_ROW_BULK=1 FERRY_Q8T_STREAM=1;;
    old) echo FERRY_MXT_LEAN=0 FERRY_ROW_PUSH=0 FERRY_F32_ROW_BULK=0;; nolean) echo FERRY_MXT_LEAN=0;; leandown) echo FERRY_MXT_LEAN=2;; nobulk) echo FERRY_F32_ROW_BULK=0;; lpb) echo FERRY_MXT_LEAN=1 FERRY_ROW_PUSH=1 FERRY_F32_ROW_BULK=1;; pl) echo FERRY_MXT_LEAN=1 FERRY_ROW_PUSH=1;; pb) echo FERRY_ROW_PUSH=1 FERRY_F32_ROW_BULK=1;;
    stream) echo FERRY_Q8T_STREAM=1;; stream2) echo FERRY_Q8T_STREAM=2;; mxset[0-9]*) echo FERRY_MXT_SET=${1#mxset};; dset[0-9]*) echo FERRY_MXT_SET_DOWN=${1#dset};; lean) echo FERRY_MXT_LEAN=1;;
    pdl-*) echo FERRY_PDL=1 FERRY_PDL_ONLY=${1#pdl-};;
    kdafuse) echo FERRY_KDA_FUSE=3;; kdadec) echo FERRY_KDA_FUSE=1;; kdaconv) echo FERRY_KDA_FUSE=2;; askda) echo FERRY_ATTN_SPLIT=1 FERRY_KDA_FUSE=3;;
    route) echo FERRY_DEVICE_ROUTE=1;; hroute) echo FERRY_DEVICE_ROUTE=0;; dsel) echo FERRY_DEVICE_SELECT=1;; nodsel) echo FERRY_DEVICE_SELECT=0;; asplit) echo FERRY_ATTN_SPLIT=1;; devsel) echo FERRY_DEVICE_ROUTE=1 FERRY_DEVICE_SELECT=1;;
  esac
}
ARMS=${ARMS:-"cores dec"}
if [ "${NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
  S="--clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats"
  K="Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occ|Issued Warp|No Eligible|Registers Per|Block Limit|L2 Hit|Warp Cycles Per Issued|Grid Size|Dynamic Shared|Mem Pipes|dec_kernel|fast_kernel|prep_x|grouped"
  for run in "dec:plain_dec|prep_x:16:2" "cores:matmul_fast:8:1"; do
    IFS=: read -r arm re skip count <<< "$run"
    stamp "ncu $arm $re (q8_0 7168x7168, 1 row)"
    env $(arm_env $arm) FERRY_BENCH_CASE="q8_0 spine 7168x7168" timeout 120 ncu $S --kernel-name regex:"$re" --launch-skip $skip \
      --launch-count $count "$B/bin/ferry_test_gpu" --gtest_filter=Ops.MatmulBenchWeightBandwidth > "$R/ncu-$arm-q8.txt" 2>&1
    grep -E "$K" "$R/ncu-$arm-q8.txt" | head -40
  done
  for arm in dec cores; do
    re=grouped_dec; [ $arm = cores ] && re=grouped_kernel
    stamp "ncu $arm $re (16 mxfp4 experts, 1 row)"
    env $(arm_env $arm) timeout 120 ncu $S --kernel-name regex:"$re" --launch-count 2 "$B/bin/ferry_test_gpu" \
      --gtest_filter=Ops.MoeBenchExpertBatchBandwidth > "$R/ncu-$arm-experts.txt" 2>&1
    grep -E "$K" "$R/ncu-$arm-experts.txt" | head -40
  done
fi
if [ "${SPLITK:-0}" = 1 ]; then
  stamp "split-K sweep and small ops (${SPLITK_FILTER:=Ops.MatmulBenchSplitKSweep:Ops.SmallOpBench*})"
  timeout 200 "$B/bin/ferry_test_gpu" --gtest_filter="$SPLITK_FILTER" > "$R/splitk.log" 2>&1
  echo "exit $?"; grep -E "^\[(splitk|smallop)\]" "$R/splitk.log"
fi
if [ "${BENCH:-1}" = 1 ]; then
  for arm in ${BENCH_ARMS:-$ARMS $ARMS}; do
    stamp "kernel benchmarks, $arm ($(arm_env $arm))"
    env $(arm_env $arm) timeout 120 "$B/bin/ferry_test_gpu" --gtest_filter='Ops.MatmulBenchWeightBandwidth:Ops.MoeBenchExpertBatchBandwidth' \
      > "$R/bench-$arm.log" 2>&1
    echo "exit $?"; grep -E "^\[bench\]" "$R/bench-$arm.log" | grep -v "depth=[12]" | head -40
  done
fi
[ "${MODEL:-1}" = 1 ] || { tar czf "$OUT/decode.tgz" -C "$R" . && rm -rf "$R"; exit 0; }
stamp "synth"
D=/dev/shm/ferry; M=$D/model; E=$D/experts
slice_for_script "$M" "$E"
# NPROMPT=n decodes after a prompt of n random ids instead of the sentence (n past the DSA layer's index_topk,
# 2,048, makes every decode step select; the slice's context is 4,096).
PROMPT=(-p "The three main financial statements are")
[ -n "${NPROMPT:-}" ] && PROMPT=(--prompt-ids "$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(0, 1024)) for _ in range($NPROMPT)))")")
for rep in $(seq 1 ${REPS:-2}); do
  for arm in $ARMS; do
    stamp "$arm decode round $rep"
    FB="$B/bin/ferry"; [ $arm = base ] && FB="$B/bin/ferry-base"
    env $(arm_env $arm) timeout 150 "$FB" run -m "$M" --backend cuda "${PROMPT[@]}" \
      -n 65 --ignore-eos --json --trace-hash "$R/$arm-$rep.hash" > "$R/$arm-$rep.json" 2> "$R/$arm-$rep.err"
    echo "exit $?"
    python3 -c "import json;j=json.load(open('$R/$arm-$rep.json'));print('$arm decode steady',j['steady'],'tok/s, prompt_s',j['prompt_s'],'ids',j['ids'][:16])"
  done
done
if [ "${STEPNCU:-0}" = 1 ] && command -v ncu > /dev/null; then
  # Device time of every kernel of a prompt pass and 3 decode steps (Nsight Compute, one metric, the
  # kernels serialized): the sum per step is what the step would take with no launch gaps and no host
  # round trips, against the steady decode's time per token above.
  for arm in ${STEPNCU_ARMS:-auto}; do
    stamp "ncu kernel durations of 3 decode steps, $arm"
    FB="$B/bin/ferry"; [ $arm = base ] && FB="$B/bin/ferry-base"
    env $(arm_env $arm) timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --page raw --print-units base \
      "$FB" run -m "$M" --backend cuda -p "The three main financial statements are" -n 4 > "$R/stepncu-$arm.csv" 2> "$R/stepncu-$arm.err"
    echo "ncu exit $?"
    python3 "$(dirname "$0")/ncu-step-summary.py" "$R/stepncu-$arm.csv" "$arm"
  done
fi
# KNCU="REGEX:SKIP:COUNT ...": Nsight Compute's sections (speed of light, occupancy, warp stalls, memory) for
# COUNT launches of the kernels matching REGEX after SKIP of them, in the slice's decode (arm auto).
# KNCU_SOURCE=1 adds the source counters: the sampled stalls per source line (the build has -lineinfo).
for spec in ${KNCU:-}; do
  command -v ncu > /dev/null || break
  IFS=: read -r re skip count <<< "$spec"
  stamp "ncu sections: $re (skip $skip, $count launches)"
  SRC=""; [ "${KNCU_SOURCE:-0}" = 1 ] && SRC="--section SourceCounters"
  timeout 240 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats $SRC \
    --kernel-name regex:"$re" --launch-skip "$skip" --launch-count "$count" \
    "$B/bin/ferry" run -m "$M" --backend cuda -p "The three main financial statements are" -n 4 > "$R/kncu-$re.txt" 2>&1
  echo "ncu exit $?"
  grep -E "^  [a-z_]+kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occ|Issued Warp|No Eligible|Registers Per|Block Limit|L2 Hit|Warp Cycles Per Issued|Grid Size|Eligible Warps|Active Warps" "$R/kncu-$re.txt" | head -${KNCU_LINES:-120}
done
for arm in $ARMS; do
  [ "${PROFILE:-1}" = 1 ] || continue
  FB="$B/bin/ferry"; [ $arm = base ] && FB="$B/bin/ferry-base"
  env $(arm_env $arm) timeout 150 "$FB" run -m "$M" --backend cuda -p "The three main financial statements are" \
    -n 17 --json --profile-ops > "$R/$arm-ops.json" 2> "$R/$arm-ops.err"
  echo "$arm profile-ops exit $?"
  python3 -c "
import json, re
j=json.load(open('$R/$arm-ops.json')); p=j['op_profile']; tot=sum(v['ms'] for v in p['ops'].values())
print('$arm ops: busy %.1f ms, span %.1f ms' % (p['busy_ms'], p['span_ms']))
def gbs(k, us):  # weight bytes of a matmul op over its time per call
    m = re.match(r'matmul (q8_0|mxfp4|f32) (\d+)x(\d+)', k)
    return '%6.0f GB/s' % (int(m.group(2)) * int(m.group(3)) * {'q8_0': 34 / 32, 'mxfp4': 17 / 32, 'f32': 4}[m.group(1)] / us / 1e3) if m else ''
for k, v in sorted(p['ops'].items(), key=lambda kv: -kv[1]['ms'])[:26]:
    us = 1e3 * v['ms'] / v['calls']
    print('  %-44s %5d %9.3f ms %5.1f %% %8.1f us/call %s' % (k, v['calls'], v['ms'], 100 * v['ms'] / tot, us, gbs(k, us)))"
done
echo "same run, two arms: logit hashes (the tensor cores change the last bits, not the greedy ids):"
for a in auto dec; do [ -f "$R/$a-1.hash" ] && [ -f "$R/cores-1.hash" ] && "$B/bin/ferry" trace diff "$R/cores-1.hash" "$R/$a-1.hash" | tail -3; done
[ -f "$R/base-1.hash" ] && echo "base vs auto (this build):" && "$B/bin/ferry" trace diff "$R/base-1.hash" "$R/auto-1.hash" | tail -3
# REF_HASH: an earlier build's auto hash file (docs/results/...), e.g. to check that new defaults keep the bits.
[ -n "${REF_HASH:-}" ] && [ -f "$R/auto-1.hash" ] && echo "auto vs $REF_HASH (an earlier build):" && "$B/bin/ferry" trace diff "$REF_HASH" "$R/auto-1.hash" | tail -3
[ -f "$R/group-1.hash" ] && echo "auto vs group (x prepared once per group): must be identical:" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/group-1.hash" | tail -3
[ -f "$R/rowmx-1.hash" ] && echo "auto vs rowmx (experts in rows, not mxfp4 tiles): must be identical:" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/rowmx-1.hash" | tail -3
[ -f "$R/onelaunch-1.hash" ] && echo "auto vs onelaunch (a group's q8_0 tiles in one launch): must be identical:" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/onelaunch-1.hash" | tail -3
[ -f "$R/row1-1.hash" ] && echo "auto vs row1 (one-row f32 kernel): must be identical:" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/row1-1.hash" | tail -3
[ -f "$R/early-1.hash" ] && echo "auto vs early (dependents launched early): must be identical:" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/early-1.hash" | tail -3
[ -f "$R/pdl-1.hash" ] && echo "auto vs pdl (small kernels as programmatic dependents): must be identical:" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/pdl-1.hash" | tail -3
[ -f "$R/ilp-1.hash" ] && echo "auto vs ilp (attention / indexer, wider loops): must be identical:" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/ilp-1.hash" | tail -3
[ -f "$R/next-1.hash" ] && echo "auto vs next (onelaunch + row1 + early + pdl + ilp): must be identical:" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/next-1.hash" | tail -3
# Every other arm only changes speed: its logits must be auto's, bit for bit.
for a in $(echo $ARMS | tr ' ' '\n' | grep -vxE 'auto|base|cores|dec.*|rowq8|nosplit|group|rowmx|onelaunch|row1|early|pdl|ilp|next|nogroup|stream.*|all'); do
  [ -f "$R/$a-1.hash" ] && echo "auto vs $a ($(arm_env $a)): must be identical:" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/$a-1.hash" | tail -3
done
[ -f "$R/nogroup-1.hash" ] && echo "auto vs nogroup (x prepared per matmul): must be identical:" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/nogroup-1.hash" | tail -3
for a in stream stream2 all; do  # another split of K: other last bits, the same greedy ids expected
  [ -f "$R/$a-1.hash" ] && echo "auto vs $a ($(arm_env $a): the stream split, other last bits):" && "$B/bin/ferry" trace diff "$R/auto-1.hash" "$R/$a-1.hash" | tail -3
  [ -f "$R/$a-2.hash" ] && echo "$a vs $a (two runs): must be identical:" && "$B/bin/ferry" trace diff "$R/$a-1.hash" "$R/$a-2.hash" | tail -3
done
[ -f "$R/rowq8-1.hash" ] && echo "rowq8 vs auto (q8_0 tiles: other last bits, same greedy ids):" && "$B/bin/ferry" trace diff "$R/rowq8-1.hash" "$R/auto-1.hash" | tail -3
[ -f "$R/nosplit-1.hash" ] && echo "auto vs nosplit (the split changes the last bits, not the greedy ids):" && "$B/bin/ferry" trace diff "$R/nosplit-1.hash" "$R/auto-1.hash" | tail -3
for a in auto dec; do
  [ -f "$R/$a-2.hash" ] && echo "$a vs $a (two runs): must be identical:" && "$B/bin/ferry" trace diff "$R/$a-1.hash" "$R/$a-2.hash" | tail -3
done
for a in dec4 dec1 decnp; do
  [ -f "$R/$a-1.hash" ] && echo "dec vs $a (the stage width): must be identical:" && "$B/bin/ferry" trace diff "$R/dec-1.hash" "$R/$a-1.hash" | tail -3
done
stamp "summary"
COPY=$(grep -ho 'device copy (read+write): [0-9]*' "$R"/bench-*.log 2>/dev/null | head -1 | grep -o '[0-9]*$')
# Else the GPU suite's Bandwidth test of this call (gpu-call.sh's or this script's log): the floor is this card's.
[ -n "$COPY" ] || COPY=$(grep -ho 'device_copy_rw_GBps [0-9.]*' "$OUT/gpu_tests.log" "$R/gpu_tests.log" 2>/dev/null | head -1 | grep -o '[0-9.]*$')
# Else (the suite filtered out or cut short) the Bandwidth test alone (a few seconds), so the floor is still
# this card's and not the H200's 4,175 GB/s.
if [ -z "$COPY" ] && [ -x "$B/bin/ferry_test_gpu" ]; then
  timeout 60 "$B/bin/ferry_test_gpu" --gtest_filter='Bandwidth.*' > "$R/bandwidth.log" 2>&1
  COPY=$(grep -ho 'device_copy_rw_GBps [0-9.]*' "$R/bandwidth.log" | head -1 | grep -o '[0-9.]*$')
fi
if [ -n "$COPY" ]; then echo "copy rate for the floor: $COPY GB/s (this card)"; else echo "copy rate for the floor: 4175 GB/s (the H200 of 2026-12-02: no measurement on this card)"; fi
python3 - "$R" "${COPY:-4175}" "${FLOOR_GB:-3.977}" $ARMS <<'PY' | tee "$OUT/decode.txt"
import json, sys, glob
r, copy, gb, arms = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
floor = gb / (copy / 1e3)  # ms
print(f"HBM floor of a decode step: {gb} GB / {copy:.0f} GB/s = {floor:.3f} ms")
for a in arms:
    ts = []
    for f in sorted(glob.glob(f"{r}/{a}-[0-9]*.json")):
        try:
            ts.append(json.load(open(f))['steady'])
        except (ValueError, KeyError):  # a run that failed (its .err says why)
            print(f"{a}: {f.rsplit('/', 1)[-1]} has no result")
    if not ts: continue
    best = max(ts)
    print(f"{a}: steady decode {' '.join(f'{t:.1f}' for t in ts)} tok/s; best {best:.1f} tok/s = "
          f"{1e3/best:.3f} ms/token = {1e3/best/floor:.2f} x the floor (target 1.5)")
PY
[ "${KEEP_SLICE:-0}" = 1 ] || rm -rf "$D"
tar czf "$OUT/decode.tgz" -C "$R" . && rm -rf "$R"  # one file back (the device call returns few)
stamp done
