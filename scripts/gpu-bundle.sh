#!/usr/bin/env bash
# Packs the binaries the GPU machine runs (built here with CUDA) into .bundle/ for one device call with
# carry [".bundle"]: `bash scripts/gpu-bench.sh` (checks + benchmark) or `bash scripts/gpu-check.sh .bundle`.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${FERRY_SHARED:-../shared}
rm -rf .bundle
# MIN=1: ferry and the GPU tests only (room for BASE within the call's 64 MiB).
if [ "${MIN:-0}" = 1 ]; then
  bash "$SHARED/tools/device-bundle.sh" .bundle build/apps/ferry build/tests/ferry_test_gpu
else
  bash "$SHARED/tools/device-bundle.sh" .bundle build/apps/ferry build/apps/ferry-server/ferry-server build/apps/ferry-drafter build/tests/ferry_test_gpu
fi
# BASE=path/to/ferry (an older build, e.g. of main in another clone) travels as bin/ferry-base: the arm
# "base" of gpu-decode.sh runs it, for A/B comparisons within one device call.
if [ -n "${BASE:-}" ]; then cp -f "$BASE" .bundle/bin/ferry-base; fi
# The CPU ceiling of verified reads on tmpfs (gpu-verify-cost.sh runs it): static, nothing to ship with it.
g++ -O2 -march=x86-64-v3 -static scripts/hash_ceiling.cpp -o .bundle/bin/hash-ceiling -lxxhash -pthread
strip .bundle/bin/* 2>/dev/null || true
# The device call carries at most 64 MiB with the tree: ship it compressed (ICU's data shrinks ~6x).
tar cJf /tmp/ferry-bundle.tar.xz -C .bundle . && rm -rf .bundle && mkdir .bundle && mv /tmp/ferry-bundle.tar.xz .bundle/
grep -qx '/.bundle/' .git/info/exclude 2>/dev/null || echo '/.bundle/' >> .git/info/exclude
du -sh .bundle
