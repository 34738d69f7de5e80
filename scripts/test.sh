#!/usr/bin/env bash
# The README's test command (and what .ci/run runs): install dependencies, build, and run the default
# test suite (everything not labelled slow or gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" -LE 'slow|gpu' "$@"
