#!/usr/bin/env bash
# Issue 12's GPU acceptance: `ferry-server -m DIR` with defaults only streams the experts of a full-width
# K3.1 slice on disk when they do not fit the GPU, and its reply equals `ferry run`'s logit for logit.
# The H200 holds the whole slice, so a second process first takes all but FREE_GB of the GPU's memory (a
# smaller GPU, as the plan sees it: it sizes everything from free memory). One device call (~3 min):
#   1. synth the slice (2 layers, 1 MoE of 896 experts) onto the disk;
#   2. `ferry run -m M --chat` with defaults on the whole GPU (resident) -> reference logit hashes;
#   3. the GPU hog; `ferry run -m M --chat` with defaults again (the plan streams) -> hashes;
#   4. `ferry-server -m M --trace-hash F` with defaults: one greedy chat; F must equal the reference;
#      /metrics must show streaming and expert reads.
# `bash scripts/gpu-bundle.sh` here, then carry [".bundle"] and run `bash scripts/gpu-server-defaults.sh`.
# Writes $OUT/server-defaults.log and the runs' JSON and stderr.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
exec > >(tee "$OUT/server-defaults.log") 2>&1
F="$B/bin/ferry"; S="$B/bin/ferry-server"
D=${BENCH_DIR:-$PWD/.benchdata-server}; R="$D/results"; M="$D/model"; E="$D/experts"
rm -rf "$D"; mkdir -p "$R"
T0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - T0)) s] $*"; }

stamp "synth: kimi_k31 full width, 2 layers (1 MoE) on the disk"
synth_slice 2 "$M" "$E"
echo "synth exit $?"; du -sh "$M" "$E"

SYS="You are terse."; USR="Tell me about ferries."; N=${NTOK:-32}
chat_run() {  # name, extra flags...
  local name=$1; shift
  stamp "ferry run --chat ($name) $*"
  sync; echo 3 > /proc/sys/vm/drop_caches
  timeout 240 "$F" run -m "$M" --chat --system "$SYS" -p "$USR" -n "$N" --json --trace-hash "$R/$name.hash" "$@" \
    > "$R/$name.json" 2> "$R/$name.err"
  echo "exit $?"; grep -iE -A12 "memory plan" "$R/$name.err" | head -16
  python3 -c "import json; d=json.load(open('$R/$name.json')); print({k: d.get(k) for k in ('backend','generated','steady','load_s')}); s=d.get('streaming'); print('streaming:', {k: s.get(k) for k in ('engine','experts_requested','disk_reads','hit_rate','bytes','verify_reads')} if s else 'off')" 2>/dev/null || tail -5 "$R/$name.err"
}
chat_run resident

FREE_GB=${FREE_GB:-14}
stamp "GPU hog: leave ${FREE_GB} GB free"
python3 - "$FREE_GB" > "$R/hog.log" 2>&1 <<'EOF' &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
take = free - int(float(sys.argv[1]) * 1e9)
x = torch.empty(take, dtype=torch.uint8, device="cuda")
print(f"holding {take/1e9:.1f} GB of {total/1e9:.1f} GB; free now {torch.cuda.mem_get_info()[0]/1e9:.1f} GB", flush=True)
time.sleep(900)
EOF
HOG=$!
for i in $(seq 1 60); do grep -q holding "$R/hog.log" && break; sleep 1; done
cat "$R/hog.log"; nvidia-smi --query-gpu=memory.total,memory.used,memory.free --format=csv

chat_run streamed
if cmp -s "$R/resident.hash" "$R/streamed.hash"; then echo "ferry run streamed: logit hashes identical to resident"; else echo "ferry run streamed: HASHES DIFFER"; fi

stamp "ferry-server -m M (defaults only) --trace-hash"
sync; echo 3 > /proc/sys/vm/drop_caches
"$S" -m "$M" --port 8094 --trace-hash "$R/server.hash" > "$R/server.log" 2>&1 &
SP=$!
for i in $(seq 1 180); do curl -sf http://127.0.0.1:8094/health >/dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 1; done
stamp "server up"
python3 - "$R" "$SYS" "$USR" "$N" <<'EOF'
import json, sys, time, urllib.request
R, sys_msg, usr, n = sys.argv[1:5]
want = json.load(open(f"{R}/resident.json"))
body = json.dumps({"model": "m", "messages": [{"role": "system", "content": sys_msg}, {"role": "user", "content": usr}],
                   "max_tokens": int(n), "temperature": 0}).encode()
t0 = time.time()
req = urllib.request.Request("http://127.0.0.1:8094/v1/chat/completions", body, {"Content-Type": "application/json"})
got = json.load(urllib.request.urlopen(req, timeout=200))
dt = time.time() - t0
print("server chat:", round(dt, 2), "s,", got["usage"], "| same text as ferry run --chat:",
      got["choices"][0]["message"]["content"] == want.get("text"))
m = urllib.request.urlopen("http://127.0.0.1:8094/metrics", timeout=10).read().decode()
for line in m.splitlines():
    if line.startswith(("ferry_streaming", "ferry_expert_reads_total", "ferry_expert_requests_total", "ferry_cache_experts",
                        "ferry_steady", "ferry_decode_tokens_per_second", "ferry_generated_tokens_total")):
        print("  ", line)
EOF
kill $SP; wait $SP 2>/dev/null
if cmp -s "$R/resident.hash" "$R/server.hash"; then echo "ferry-server defaults: logit hashes identical to ferry run resident ($(wc -l < "$R/server.hash") tokens)"; else echo "ferry-server defaults: HASHES DIFFER"; diff "$R/resident.hash" "$R/server.hash" | head; fi
grep -iE -A12 "memory plan" "$R/server.log" | head -16; grep "ferry-server:" "$R/server.log" | head -5
kill $HOG 2>/dev/null; wait $HOG 2>/dev/null
tar czf "$OUT/server-defaults.tgz" -C "$R" .
stamp "done"
