# Sourced by the GPU-machine scripts (gpu-acceptance, gpu-pipeline, gpu-bench, gpu-verify-cost): unpacks
# the bundle that `scripts/gpu-bundle.sh` made (carried as .bundle), and sets B (the bundle), OUT (the
# results folder the device call returns; created) and LD_LIBRARY_PATH (the bundled libraries), and
# defines synth_slice.
[ -f .bundle/ferry-bundle.tar.xz ] && tar xJf .bundle/ferry-bundle.tar.xz -C .bundle && rm .bundle/ferry-bundle.tar.xz
B=$(cd .bundle && pwd)
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# synth_slice LAYERS MODEL_DIR EXPERT_DIR...: a full-width Kimi K3.1 slice of LAYERS layers (layer 0 dense,
# the rest MoE with 896 experts), routers fitted to the real K3 usage counts, prepared into MODEL_DIR
# with its experts spread over the EXPERT_DIRs. Returns synth's exit status.
synth_slice() {
  local layers=$1 model=$2 d; shift 2
  local dirs=()
  for d in "$@"; do dirs+=(--expert-dir "$d"); done
  timeout 300 "$B/bin/ferry" synth --arch kimi_k31 --preset full --layers "$layers" --quiet \
    --usage tests/fixtures/k3-expert-usage-2026-09-03.json --prepared "$model" "${dirs[@]}" --threads "$(nproc)"
}
