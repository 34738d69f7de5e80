#!/usr/bin/env bash
# The README's first command: install dependencies, build, and run `ferry demo` (a small random Kimi
# K3-architecture model made on the spot).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/apps/ferry demo "$@"
