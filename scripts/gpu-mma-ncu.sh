#!/usr/bin/env bash
# Nsight Compute on the prompt pass's tensor-core kernels (issue 14): the plain q8_0 matmul and the
# grouped mxfp4 expert matmul inside a 1,024-token resident prompt pass of the 4-layer K3.1 slice.
# Builds nothing: `bash scripts/gpu-bundle.sh` here, carry [".bundle"], `bash scripts/gpu-mma-ncu.sh`.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
exec > >(tee "$OUT/mma-ncu.log") 2>&1
T0=$(date +%s); stamp() { echo "== [$(($(date +%s) - T0)) s] $*"; }
D=/dev/shm/ferry; M=$D/model; E=$D/experts
rm -rf "$D"; mkdir -p "$D"
stamp synth
timeout 200 "$B/bin/ferry" synth --arch kimi_k31 --preset full --layers ${LAYERS:-4} --quiet \
  --usage tests/fixtures/k3-expert-usage-2026-09-03.json --prepared "$M" --expert-dir "$E" --threads "$(nproc)" > /dev/null
IDS=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(0, 1024)) for _ in range(1024)))")
S="--clock-control none --section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section ComputeWorkloadAnalysis"
for k in "plain_mma_kernel:3" "grouped_mma_kernel:20" "grouped_mma_kernel:21"; do
  name=${k%:*}; skip=${k#*:}
  stamp "ncu $name skip $skip"
  timeout 150 ncu $S --kernel-name regex:$name --launch-skip $skip --launch-count 1 "$B/bin/ferry" run -m "$M" --backend cuda \
    --prompt-ids "$IDS" -n 1 --ignore-eos --json > "$OUT/ncu-$name-$skip.txt" 2>&1
  grep -E "mma_kernel|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occ|Issued Warp|No Eligible|Registers Per|Executed Ipc|Block Limit|L1/TEX Hit|L2 Hit|Stall|Warp Cycles Per Issued|Grid Size|Dynamic Shared|Tensor|Pipe" "$OUT/ncu-$name-$skip.txt" | head -60
done
rm -rf "$D"
stamp done
