#!/usr/bin/env bash
# One device call for the acceptance checks of the product path (issue 12), verified reads (issue 16) and
# the resident kernels (issue 14) on the H200. Builds nothing: `bash scripts/gpu-bundle.sh` here, then one
# `device run` with carry [".bundle"] and the command `bash scripts/gpu-acceptance.sh`.
#
# 1. the GPU test suite (ops vs CPU, fixtures, block exactness, streaming through the device tier);
# 2. a full-width Kimi K3.1 slice on the disk (`ferry synth --prepared`, 1 MoE layer of 896 experts);
# 3. `ferry run -m M` with defaults only (the plan decides: on this machine everything fits, so resident);
# 4. the same with the machine capped by --gpu-mem/--host-mem so the plan streams from the disk, with
#    verified reads (the default) and with --no-verify-reads: the cost of hashing;
# 5. `ferry-server -m M` with the same caps serves a chat (greedy) whose text and token count equal
#    `ferry run --chat`'s, and /metrics shows the engine's expert reads.
# Writes $OUT/acceptance.log and $OUT/acceptance.json.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
exec > >(tee "$OUT/acceptance.log") 2>&1
export FERRY_FIXTURES_DIR="$PWD/tests/fixtures"
F="$B/bin/ferry"; S="$B/bin/ferry-server"
D=${BENCH_DIR:-$PWD/.benchdata}; R="$D/results"; mkdir -p "$D" "$R"
T0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - T0)) s] $*"; }

stamp "machine"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
free -g | head -2; df -h "$D" | tail -1

if [ -z "${SKIP_GPU_TESTS:-}" ]; then
  stamp "GPU tests"
  timeout ${GPU_TEST_TIMEOUT:-200} "$B/bin/ferry_test_gpu" > "$R/gpu_tests.log" 2>&1
  echo "gpu tests exit $?"; grep -E "^\[  (PASSED|FAILED)|tests ran" "$R/gpu_tests.log" | tail -8
  cp "$R/gpu_tests.log" "$OUT/gpu_tests.log"
fi

M="$D/model"; E="$D/experts"; rm -rf "$M" "$E"
stamp "synth: kimi_k31 full width, 2 layers (1 MoE)"
synth_slice 2 "$M" "$E"
echo "synth exit $?"; du -sh "$M" "$E"

P="The three main financial statements are"
# The plan reserves 7.8 GB of activations for a 4096-token context beside the 1.74 GB spine: 12 GB of GPU
# leaves ~2 GB for expert slots (~12 % of the 896 experts), 6 GB of host ~310 pool slots: the rest streams.
CAPS=(--gpu-mem 12GB --host-mem 6GB)
run() {  # name, extra flags...
  local name=$1; shift
  stamp "ferry run $name: $*"
  sync; echo 3 > /proc/sys/vm/drop_caches
  timeout 240 "$F" run -m "$M" -p "$P" -n ${NTOK:-48} --json --trace-hash "$R/$name.hash" "$@" \
    > "$R/$name.json" 2> "$R/$name.err"
  echo "exit $?"; grep -iE -A14 "memory plan" "$R/$name.err" | head -24
  python3 -c "import json,sys; d=json.load(open('$R/$name.json')); print({k: d.get(k) for k in ('steady_tok_s','generation_tok_s','generated','prompt_pass_s','streaming','expert_reads','hash_s','verify_s')})" 2>/dev/null || tail -5 "$R/$name.err"
}
run defaults
run capped "${CAPS[@]}"
run capped-noverify "${CAPS[@]}" --no-verify-reads
for h in capped capped-noverify; do
  if cmp -s "$R/defaults.hash" "$R/$h.hash"; then echo "$h: logit hashes identical to defaults"; else echo "$h: HASHES DIFFER"; fi
done

stamp "ferry-server with the caps: one greedy chat vs ferry run --chat"
SYS="You are terse."; USR="Tell me about ferries."
timeout 200 "$F" run -m "$M" "${CAPS[@]}" --chat --system "$SYS" -p "$USR" -n 24 --json > "$R/chat-run.json" 2> "$R/chat-run.err"
echo "ferry run --chat exit $?"
"$S" -m "$M" "${CAPS[@]}" --port 8093 > "$R/server.log" 2>&1 &
SP=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:8093/health >/dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 1; done
python3 - "$R" "$SYS" "$USR" <<'EOF'
import json, sys, time, urllib.request
R, sys_msg, usr = sys.argv[1:4]
want = json.load(open(f"{R}/chat-run.json"))
body = json.dumps({"model": "m", "messages": [{"role": "system", "content": sys_msg}, {"role": "user", "content": usr}],
                   "max_tokens": 24, "temperature": 0}).encode()
t0 = time.time()
req = urllib.request.Request("http://127.0.0.1:8093/v1/chat/completions", body, {"Content-Type": "application/json"})
got = json.load(urllib.request.urlopen(req, timeout=180))
dt = time.time() - t0
text = got["choices"][0]["message"]["content"]
print("server chat:", round(dt, 2), "s,", got["usage"])
print("same text as ferry run --chat:", text == want.get("text"), "| same token count:",
      got["usage"]["completion_tokens"] == want.get("generated"))
m = urllib.request.urlopen("http://127.0.0.1:8093/metrics", timeout=10).read().decode()
for line in m.splitlines():
    if line.startswith(("ferry_streaming", "ferry_expert_reads_total", "ferry_expert_requests_total", "ferry_cache_experts")):
        print("  ", line)
EOF
kill $SP; wait $SP 2>/dev/null
grep -iE -A14 "memory plan" "$R/server.log" | head -20
cp "$R"/*.json "$R"/*.err "$R/server.log" "$OUT/" 2>/dev/null
stamp "done"
