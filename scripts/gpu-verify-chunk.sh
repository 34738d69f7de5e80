#!/usr/bin/env bash
# Verified reads on tmpfs, hashed as they are copied (issue 16 item 2, issue 13 item 1): the pread
# workers read each 2 MiB part CHUNK bytes at a time and hash each chunk right after its pread, while it
# is in the core's L2 (FERRY_PREAD_CHECK_CHUNK; "whole" = one pread per part, then the hash: the way
# before). One device call (~4 min): the pipeline's model (full-width K3.1, NMOE MoE layers, experts in 4
# tmpfs directories, caches at the reference machine's fractions), arms interleaved over REPS rounds,
# 257 greedy tokens each, logit hashes compared with the unverified run, and a 1,024-token prompt pass
# per chunk setting. `bash scripts/gpu-bundle.sh` here; there (carry [".bundle"]):
# `bash scripts/gpu-verify-chunk.sh`. Writes $OUT/verify-chunk.log and $OUT/verify-chunk.tgz.
# STORE=disk: the experts on the machine's disk instead (O_DIRECT, io_uring, the hashers check each read;
# no `cat` ceiling: the page cache would answer it); NTOK sets the decode length (default 257).
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
exec > >(tee "$OUT/verify-chunk.log") 2>&1
F="$B/bin/ferry"; D=$PWD/.benchdata; R=$D/results; S=/dev/shm/ferry-vchunk
[ "${STORE:-tmpfs}" = disk ] && S=$D/experts
NTOK=${NTOK:-257}
rm -rf "$D" "$S"; mkdir -p "$R" "$S"; trap 'rm -rf "$S"' EXIT
NMOE=${NMOE:-3}; REPS=${REPS:-2}
T0=$(date +%s); stamp() { echo "== [$(($(date +%s) - T0)) s] $*"; }
stamp "synth: $NMOE MoE layers"
M=$D/model
synth_slice $((NMOE + 1)) "$M" "$S"/e{0..3} || exit 1
cp "$M/usage.json" "$D/usage.orig.json"
NEXP=$((896 * NMOE)); EXB=17547264
reference_caches "$NEXP"; HP="$((HPN * EXB))B"
CEIL=1
if [ "${STORE:-tmpfs}" != disk ]; then
  stamp "ceiling: 16 parallel cat"
  cat_ceiling "$S" $((NEXP * EXB))
  [ -x "$B/bin/hash-ceiling" ] && timeout 60 "$B/bin/hash-ceiling" "$S/e0" "$S/e1" | tail -8
fi
P="The three main financial statements are"
python3 -c "import random; random.seed(7); print(','.join(str(random.randrange(0, 1024)) for _ in range(1024)))" > "$D/p.ids"
run() {  # name, chunk ("-" = unset), then flags
  local name=$1 chunk=$2; shift 2
  cp "$D/usage.orig.json" "$M/usage.json"
  local input=(-p "$P" -n "$NTOK" --trace-hash "$R/$name.hash")
  [[ $name == prompt* ]] && input=(--prompt-ids "$(cat "$D/p.ids")" -n 1)
  ( [ "$chunk" != - ] && export FERRY_PREAD_CHECK_CHUNK=$chunk
    timeout 150 "$F" run -m "$M" --ssd-streaming --backend cuda --cache-experts "$DC" --host-pool "$HP" \
      "${input[@]}" --ignore-eos --json --trace "$R/$name.trace" "$@" > "$R/$name.json" 2> "$R/$name.err" )
  local rc=$?
  "$F" trace "$R/$name.trace" > "$R/$name.trace.txt" 2>&1
  python3 - "$R" "$name" "$rc" "$CEIL" "$chunk $*" <<'PY'
import json, re, sys
R, name, rc, ceil, flags = sys.argv[1:6]
try: j = json.load(open(f"{R}/{name}.json"))
except Exception as e: print(name, "rc", rc, "no json", e); sys.exit()
s = j.get("streaming", {}); v = s.get("verify_reads", {})
m = re.search(r"([0-9.]+) MB/s aggregate while reading", open(f"{R}/{name}.trace.txt").read())
rate = float(m.group(1)) / 1e3 if m else 0
v_s = f" | hashers {v.get('hashes')} on {v.get('threads')} threads, {v.get('hash_s', 0):.2f} s"
print(f"{name:18s} rc {rc} steady {j.get('steady') or 0:6.2f} tok/s prompt {j.get('prompt_s') or 0:5.2f} s | read {rate:5.1f} GB/s = {rate/float(ceil):.2f} x ceiling"
      f" | in-reader checks {v.get('in_reader')}{v_s} | engine {s.get('engine')} | layer wait {s.get('layer_wait_s', 0):.2f} s | {flags}")
PY
  [[ $name == prompt* ]] || [ "$name" = "${REF:-noverify1}" ] || cmp -s "$R/${REF:-noverify1}.hash" "$R/$name.hash" || echo "  $name: LOGIT HASHES DIFFER from ${REF:-noverify1}"
}
# ARMS: "name:chunk:flags,..." (chunk "-" = unset; flags space-separated), run REPS times interleaved;
# PROMPT_ARMS the same for 1,024-token prompt passes (their names start with "prompt").
ARMS=${ARMS:-"noverify:-:--no-verify-reads,whole:whole:,c256k:262144:,c64k:65536:,c1m:1048576:"}
PROMPT_ARMS=${PROMPT_ARMS-"prompt-noverify:-:--no-verify-reads,prompt-whole:whole:,prompt-c256k:262144:,prompt-c64k:65536:"}
for rep in $(seq 1 "$REPS"); do
  stamp "round $rep"
  IFS=',' read -ra arms <<< "$ARMS"
  for a in "${arms[@]}"; do
    IFS=':' read -r name chunk flags <<< "$a"
    # shellcheck disable=SC2086
    run "$name$rep" "$chunk" $flags
  done
done
stamp "prompt passes"
IFS=',' read -ra arms <<< "$PROMPT_ARMS"
for a in "${arms[@]}"; do
  IFS=':' read -r name chunk flags <<< "$a"
  # shellcheck disable=SC2086
  [ -n "$name" ] && run "$name" "$chunk" $flags
done
tar czf "$OUT/verify-chunk.tgz" -C "$R" . 2>/dev/null
stamp done
