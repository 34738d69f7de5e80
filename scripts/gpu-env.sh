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

# slice_for_script MODEL_DIR EXPERT_DIR: the 4-layer (LAYERS) slice in MODEL_DIR, or, with REUSE_SLICE=1,
# the one an earlier script of this device call left there (KEEP_SLICE=1 there). Under D, cleared first.
slice_for_script() {
  if [ "${REUSE_SLICE:-0}" = 1 ] && [ -d "$1" ]; then
    echo "reusing the slice an earlier script of this call left (REUSE_SLICE=1)"
  else
    rm -rf "$D"; mkdir -p "$D"
    synth_slice ${LAYERS:-4} "$1" "$2"; echo "synth exit $?"
  fi
  du -sh "$1" "$2"
}

# reference_caches NEXP: sets DC (device cache) and HPN (host pool), in experts, for a model of NEXP
# routed experts at the reference machine's fractions (27.5 and 53.7 GB of K3.1's 1,450 GB).
reference_caches() {
  DC=$(python3 -c "print(round($1 * 27.5 / 1450))")
  HPN=$(python3 -c "print(int($1 * 53.7 / 1450))")
}

# cat_ceiling DIR BYTES: sets CEIL to the GB/s of 16 parallel `cat` of every DIR/e*/*.bin (BYTES in all),
# the read ceiling the engine's rate is compared with, and prints it.
cat_ceiling() {
  local t0 t1
  sync
  t0=$(date +%s.%N)
  ls "$1"/e*/*.bin | xargs -P 16 -n 16 cat > /dev/null
  t1=$(date +%s.%N)
  CEIL=$(python3 -c "print($2 / ($t1 - $t0) / 1e9)")
  echo "parallel cat: $CEIL GB/s"
}
