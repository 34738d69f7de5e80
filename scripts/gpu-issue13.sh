#!/usr/bin/env bash
# Issue 13's targets in one device call (~6 min), each as a ratio with its ceiling measured in the same
# call. Builds nothing: `bash scripts/gpu-bundle.sh` here, then carry [".bundle"] and run
# `bash scripts/gpu-issue13.sh` there.
#  1, 3, 4: scripts/gpu-pipeline.sh (PIPELINE_QUICK=1, 3 MoE layers on 4 tmpfs directories): the read rate
#     in decode and in a 1,024-token prompt pass over the parallel `cat` ceiling, the hit rate over the best
#     static set in hindsight (and Belady, LRU), router prefetch against the default; verified reads
#     against --no-verify-reads and --verify-late on the way (issue 16).
#  2: scripts/gpu-upload-overlap.sh (8 upload streams): host-resident streaming over its floor (upload
#     bytes / the pinned H2D rate measured with torch + the all-resident time per token).
#  5: scripts/gpu-drafter.sh, the streamed slice only: replay at 0-100 % acceptance and the n-gram drafter
#     with the cost gate, against plain, arms interleaved.
# Writes everything those scripts write into $OUT, and $OUT/issue13.txt (the targets).
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
here=$(dirname "$0")
T0=$(date +%s); stamp() { echo "== [$(($(date +%s) - T0)) s] $*"; }
stamp "pipeline"
PIPELINE_QUICK=1 PIPELINE_MOE=${PIPELINE_MOE:-3} timeout 300 bash "$here/gpu-pipeline.sh" > /dev/null 2>&1
stamp "upload overlap"
UPLOAD_STREAMS=8 timeout 150 bash "$here/gpu-upload-overlap.sh" > /dev/null 2>&1
stamp "drafter"
SETUPS=stream NSTREAM=${NSTREAM:-257} REPS_STREAM=${REPS_STREAM:-2} ARMS="plain replay0 replay25 replay50 replay75 replay100 ngram" \
  timeout 240 bash "$here/gpu-drafter.sh" > /dev/null 2>&1
stamp "targets"
{
  echo "items 1, 3, 4 (and issue 16's verification cost):"
  python3 -c "import json; print(json.dumps(json.load(open('$OUT/results.json'))['targets'], indent=1))"
  echo "item 2 (<= 1.15 x floor):"; grep "upload streams" "$OUT/upload-overlap.txt"
  echo "item 5 (>= 0.97 x plain at every acceptance, above plain where it allows):"; grep -E "median|no runs" "$OUT/drafter.txt"
} 2>&1 | tee "$OUT/issue13.txt"
stamp done
