#!/usr/bin/env bash
# Builds the whole default test suite with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan and runs it (issue 16: hostile files must not corrupt memory). Any sanitizer report fails
# the run: UBSan is made fatal (halt_on_error), ASan aborts on the first error by default.
#   scripts/sanitize.sh                 # the default suite (-LE 'slow|gpu'); over an hour on 2 cores
#   scripts/sanitize.sh -R 'Fuzz|Limits' # extra ctest arguments select tests
#   TARGETS="ferry_test_io_fuzz ferry_test_io_formats" scripts/sanitize.sh -L 'io/fuzz|io/formats'
#                                       # build only those test binaries (and what they run)
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_SANITIZE=address,undefined \
      -DFERRY_CUDA=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
# shellcheck disable=SC2086
cmake --build build-asan -j"$JOBS" ${TARGETS:+--target $TARGETS}
# detect_leaks=0: CAF and io_uring keep process-lifetime allocations that LeakSanitizer reports.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
ctest --test-dir build-asan -j"$JOBS" -LE 'slow|gpu' --output-on-failure "$@"
