#!/usr/bin/env bash
# Issue 8's GPU suite in one device call: `ferry bench` over config/bench/gpu-h200.json (it makes its
# model), then the report. Prepare with scripts/gpu-bundle.sh; run from the repository root with carry
# [".bundle"]. Writes $OUT/gpu-h200.json (every run), $OUT/report.md and $OUT/svg/.
set -uo pipefail
[ -f .bundle/ferry-bundle.tar.xz ] && tar xJf .bundle/ferry-bundle.tar.xz -C .bundle && rm .bundle/ferry-bundle.tar.xz
B=$(cd .bundle && pwd)
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
F="$B/bin/ferry"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$F" bench --suite config/bench/gpu-h200.json --out "$OUT/gpu-h200.json" --models-dir "$PWD/.benchmodels" 2>&1 | tail -40
"$F" bench report "$OUT/gpu-h200.json" --svg "$OUT/svg" | tee "$OUT/report.md"
