#!/usr/bin/env bash
# What the open issues wait for, in one device call (~4 min): builds nothing. Here: `bash scripts/gpu-bundle.sh`;
# there (carry [".bundle"]): `bash scripts/gpu-next.sh`.
#  1. Every GPU test (63): the CUDA back-end against the CPU and the fixtures, and GpuPrefillChunk (prompt
#     passes that start at a multiple of 64 positions, the rule behind --prefill-chunk and the server's
#     prompt cache, never run on a GPU yet).
#  2. scripts/gpu-pipeline.sh with PIPELINE_QUICK=1 PIPELINE_MOE=3: auto, noverify, late (--verify-late,
#     issue 16: target >= 0.95x noverify, then make it the default) and rp (--prefetch-router, issue 13 item 4:
#     the default only if faster than auto), logit hashes diffed against auto.
# Writes $OUT/gpu_tests.log, $OUT/pipeline.log, $OUT/results.json, $OUT/results.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
echo "== GPU tests"
timeout "${GPU_TEST_TIMEOUT:-240}" "$B/bin/ferry_test_gpu" > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests exit $?"
grep -E "^\[  (PASSED|FAILED)|tests ran|gpu-model .*passes of 64" "$OUT/gpu_tests.log" | tail -16
echo "== pipeline (3 MoE layers, quick)"
PIPELINE_QUICK=1 PIPELINE_MOE="${PIPELINE_MOE:-3}" bash "$(dirname "$0")/gpu-pipeline.sh" > /dev/null 2>&1
echo "pipeline exit $?"
python3 -c "import json; print(json.dumps(json.load(open('$OUT/results.json'))['targets'], indent=1))" 2>&1
