#!/usr/bin/env bash
# Configure and build ferry (Release, CPU + CUDA when nvcc is present) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
