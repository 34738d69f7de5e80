# Sourced by the GPU-machine scripts (gpu-acceptance, gpu-pipeline, gpu-bench, gpu-verify-cost): unpacks
# the bundle that `scripts/gpu-bundle.sh` made (carried as .bundle), and sets B (the bundle), OUT (the
# results folder the device call returns; created) and LD_LIBRARY_PATH (the bundled libraries).
[ -f .bundle/ferry-bundle.tar.xz ] && tar xJf .bundle/ferry-bundle.tar.xz -C .bundle && rm .bundle/ferry-bundle.tar.xz
B=$(cd .bundle && pwd)
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
