#!/usr/bin/env bash
# What verified reads cost on fast storage, and which split of the cores between pread workers and
# hashers pays (issue 16's "< 5 % of decode time", issue 13's read rate). One device call (~3 min):
# the pipeline's model (full-width K3.1, 2 MoE layers, experts in 4 tmpfs directories, caches at the
# reference machine's fractions), 257 greedy tokens per variant, logit hashes compared.
# `bash scripts/gpu-bundle.sh` here, then carry [".bundle"] and run `bash scripts/gpu-verify-cost.sh`.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
F="$B/bin/ferry"; D=$PWD/.benchdata; R=$D/results; S=/dev/shm/ferry-verify
rm -rf "$D" "$S"; mkdir -p "$R" "$S"; trap 'rm -rf "$S"' EXIT
M=$D/model
synth_slice 3 "$M" "$S"/e{0..3} || exit 1
cp "$M/usage.json" "$D/usage.orig.json"
# The CPU's own ceiling on these files: N threads pread 2 MiB parts, with and without xxh64 (what the
# pread workers do): the part of the verification cost no scheduling can remove.
[ -x "$B/bin/hash-ceiling" ] && "$B/bin/hash-ceiling" "$S/e0" "$S/e1" "$S/e2" "$S/e3" | tee "$R/hash-ceiling.txt"
EXB=17547264; HP="$((66 * EXB))B"
run() {  # name, flags...
  local name=$1; shift
  cp "$D/usage.orig.json" "$M/usage.json"
  timeout 120 "$F" run -m "$M" --ssd-streaming --backend cuda --cache-experts 34 --host-pool "$HP" \
    -p "The three main financial statements are" -n 257 --ignore-eos --json --trace-hash "$R/$name.hash" "$@" \
    > "$R/$name.json" 2> "$R/$name.err"
  local rc=$?
  python3 - "$R/$name.json" "$name" "$rc" "$*" <<'PY'
import json, sys
p, name, rc, flags = sys.argv[1:5]
try: j = json.load(open(p))
except Exception as e: print(name, "rc", rc, "no json", e); sys.exit()
s = j.get("streaming", {}); v = s.get("verify_reads", {})
print(f"{name:14s} rc {rc} steady {j.get('steady', 0):6.2f} tok/s | hashes {v.get('hashes')} on {v.get('threads')} threads + {v.get('in_reader')} checked in the readers, "
      f"{v.get('hash_s', 0):.2f} s | layer wait {s.get('layer_wait_s', 0):.2f} s | flags: {flags}")
PY
  cmp -s "$R/base.hash" "$R/$name.hash" || [ "$name" = base ] || echo "  $name: LOGIT HASHES DIFFER from base"
}
run base --no-verify-reads
run verify-auto
if [ -z "${QUICK:-}" ]; then  # QUICK=1: the defaults only
  run verify-h4 --hash-threads 4
  run verify-h8-io2 --hash-threads 8 --io-threads 2
  run verify-h6-io3 --hash-threads 6 --io-threads 3
  run verify-h12-io1 --hash-threads 12 --io-threads 1
  run noverify-io3 --no-verify-reads --io-threads 3
fi
tar czf "$OUT/verify-cost.tgz" -C "$R" .
