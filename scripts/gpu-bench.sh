#!/usr/bin/env bash
# Issue 5's one device call: the GPU checks, then the H200 benchmark, in under 10 minutes. Builds
# nothing. Prepare here (scripts/gpu-bundle.sh does it), then one `device run` with carry [".bundle"]
# and the command `bash scripts/gpu-bench.sh` from the repository root.
#
# The benchmark model is a full-width Kimi K3.1 (hidden 7168, 896 experts of 17,547,264 B per MoE layer,
# top-16, 2 shared) with as many MoE layers as the disk allows, router popularity fitted to the real K3
# usage counts, written straight in the prepared layout (`ferry synth --prepared`). Ceilings are measured
# in the same call: O_DIRECT reads of the expert files and pinned host->device copies.
# Writes $OUT/bench.log (everything printed), $OUT/results.json (the numbers) and $OUT/results.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
exec > >(tee "$OUT/bench.log") 2>&1
export FERRY_FIXTURES_DIR="$PWD/tests/fixtures"
F="$B/bin/ferry"
D=${BENCH_DIR:-$PWD/.benchdata}
R="$D/results"
mkdir -p "$D" "$R"
T0=$(date +%s)
stamp() { echo "== [$(($(date +%s) - T0)) s] $*"; }

stamp "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
df -h "$D" | tail -1
nproc; free -g | head -2

# 1. GPU tests (op checks vs CPU, fixtures, block exactness, CPU vs CUDA greedy ids, ceilings).
stamp "GPU tests"
timeout 240 "$B/bin/ferry_test_gpu" --gtest_output="json:$R/gpu_tests.json" > "$R/gpu_tests.log" 2>&1
echo "gpu tests exit $?"
grep -E "PASSED|FAILED|tests ran" "$R/gpu_tests.log" | tail -5
BW=$(grep -o "BANDWIDTH.*" "$R/gpu_tests.log" | head -1)
echo "$BW"
H2D=$(echo "$BW" | awk '{print $3}')
HBM=$(echo "$BW" | awk '{print $7}')

# 2. The model: as many MoE layers (15.7 GB of experts each) as the free disk allows, at most 3.
FREE_GB=$(df -BG --output=avail "$D" | tail -1 | tr -dc 0-9)
NMOE=$(( (FREE_GB - 8) / 16 )); [ "$NMOE" -gt 3 ] && NMOE=3; [ "$NMOE" -lt 1 ] && NMOE=1
LAYERS=$((NMOE + 1))
stamp "synth: kimi_k31 full width, $LAYERS layers ($NMOE MoE), free ${FREE_GB}G"
M="$D/model"; E="$D/experts"
rm -rf "$M" "$E"
synth_slice "$LAYERS" "$M" "$E"
echo "synth exit $?"
du -sh "$M" "$E"
NEXP=$((896 * NMOE))
EXB=17547264

# 3. Ceiling: O_DIRECT reads of 256 expert files (4.5 GB), 16 at a time, 16 MB requests.
stamp "O_DIRECT read ceiling"
sync; echo 3 > /proc/sys/vm/drop_caches
t0=$(date +%s.%N)
ls "$E"/*.bin | shuf -n 256 --random-source=<(yes) | xargs -P 16 -I{} dd if={} of=/dev/null bs=16M iflag=direct status=none
t1=$(date +%s.%N)
DISK=$(python3 -c "print(256*$EXB/($t1-$t0)/1e9)")
echo "O_DIRECT read: $DISK GB/s"

# 4. Streaming at the reference machine's cache fractions: device 27.5 GB and host 53.7 GB of 1.45 TB.
DC=$(python3 -c "print(round($NEXP*27.5/1450))")
HP=$(python3 -c "print(int($NEXP*53.7/1450)*$EXB)")
P="The three main financial statements are"
run_stream() {  # name, extra args
  local name=$1; shift
  sync; echo 3 > /proc/sys/vm/drop_caches
  stamp "streaming run $name (device cache $DC experts, host pool $HP B)"
  timeout 150 "$F" run -m "$M" --ssd-streaming --backend cuda --cache-experts "$DC" --host-pool "${HP}B" \
    -p "$P" --json --trace "$R/$name.trace" --trace-hash "$R/$name.hash" "$@" > "$R/$name.json" 2> "$R/$name.err"
  echo "exit $?"; tail -3 "$R/$name.err"
  python3 -c "import json;j=json.load(open('$R/$name.json'));s=j.get('streaming',{});print('steady',j['steady'],'generated',j['generated'],'prompt_s',j['prompt_s'],'bytes',s.get('bytes'),'hits',s.get('hits'),'wait',s.get('layer_wait_s'),'draft',j.get('draft'))"
}
run_stream prompt -n 1      # the prompt pass alone: its bytes are subtracted to get decode bytes per token
run_stream plain -n 33
"$F" trace "$R/plain.trace" > "$R/plain.trace.txt" 2>&1; head -40 "$R/plain.trace.txt"
"$F" trace "$R/plain.trace" --svg "$R/svg" > /dev/null 2>&1

# 5. A 16-row block against 16 plain steps: replay the plain run's own tokens with every draft right,
#    so each block is the current token + 15 drafts, all accepted.
python3 -c "import json;j=json.load(open('$R/plain.json'));json.dump({'ids':j['prompt_ids']+j['ids']},open('$R/replay.json','w'))"
run_stream block -n 33 --draft "replay:$R/replay.json,rate=1,conf=1" --draft-gate 0 --draft-max 15
"$F" trace diff "$R/plain.hash" "$R/block.hash"
# One upload stream instead of 8: what overlapping uploads with compute buys (same bytes, same output).
run_stream upload1 -n 33 --upload-streams 1
"$F" trace diff "$R/plain.hash" "$R/upload1.hash"

# 6. All experts resident on the GPU (the slice fits in 141 GB), plain and in 16-row blocks.
stamp "resident run"
timeout 200 "$F" run -m "$M" --backend cuda -p "$P" -n 65 --json --trace-hash "$R/resident.hash" > "$R/resident.json" 2> "$R/resident.err"
echo "exit $?"; tail -2 "$R/resident.err"
"$F" trace diff "$R/plain.hash" "$R/resident.hash"
python3 -c "import json;j=json.load(open('$R/resident.json'));json.dump({'ids':j['prompt_ids']+j['ids']},open('$R/replay65.json','w'))"
timeout 200 "$F" run -m "$M" --backend cuda -p "$P" -n 65 --json --trace-hash "$R/resblock.hash" \
  --draft "replay:$R/replay65.json,rate=1,conf=1" --draft-gate 0 --draft-max 15 > "$R/resblock.json" 2> "$R/resblock.err"
echo "exit $?"; "$F" trace diff "$R/resident.hash" "$R/resblock.hash"
# Where the resident decode's time goes: section times with a sync at each edge (slower than the rate).
timeout 120 "$F" run -m "$M" --backend cuda -p "$P" -n 17 --json --profile > "$R/profile.json" 2> "$R/profile.err"
echo "profile exit $?"
# The same op by op: device time per op (events around each), and how busy the device was.
timeout 120 "$F" run -m "$M" --backend cuda -p "$P" -n 17 --json --profile-ops > "$R/profile_ops.json" 2> "$R/profile_ops.err"
echo "profile-ops exit $?"; grep "ferry: " "$R/profile_ops.err" | head -34

stamp "summary"
python3 - "$R" "$NMOE" "$DISK" "$H2D" "$HBM" "$M" <<'EOF' | tee "$OUT/results.json"
import json, os, sys
R, nmoe, disk, h2d, hbm, M = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4] or 0), float(sys.argv[5] or 0), sys.argv[6]
def load(n):
    try: return json.load(open(f"{R}/{n}.json"))
    except Exception as e: return {"error": str(e)}
plain, block, res, prompt, resblock = load("plain"), load("block"), load("resident"), load("prompt"), load("resblock")
up1, prof, pops = load("upload1"), load("profile"), load("profile_ops")
out = {"moe_layers": nmoe, "ceilings_GBps": {"o_direct_read": disk, "pinned_h2d": h2d, "device_copy_rw": hbm}}
def per_token(j):
    return 1.0 / j["steady"] if j.get("steady") else None
s = plain.get("streaming", {})
if "steady" in plain and s:
    b = s["bytes"]; n = plain["generated"]
    # decode bytes per token by tier: this run minus the prompt pass alone (same cold start), per step
    pb = prompt.get("streaming", {}).get("bytes", {"disk": 0, "upload": 0})
    disk_b = (b["disk"] - pb["disk"]) / max(n - 1, 1); up_b = (b.get("upload", 0) - pb.get("upload", 0)) / max(n - 1, 1)
    drive = s.get("drives", [{}])[0].get("rate_bps", 0) / 1e9
    out["ceilings_GBps"]["engine_reader_est"] = drive
    try:  # the reader's achieved rate while it had reads in flight (ferry trace), preferred over the estimate
        import re
        m = re.search(r"([0-9.]+) MB/s while active", open(f"{R}/plain.trace.txt").read())
        if m:
            drive = float(m.group(1)) / 1e3
            out["ceilings_GBps"]["engine_reader_active"] = drive
    except OSError:
        pass
    floor = disk_b / (disk * 1e9) + up_b / (h2d * 1e9)
    t = per_token(plain)
    out["streaming"] = {"steady_tok_s": plain["steady"], "time_per_token_s": t, "disk_bytes_per_token": disk_b,
                        "upload_bytes_per_token": up_b, "io_floor_s": floor, "ratio_to_floor": t / floor if floor else None,
                        "io_floor_at_reader_rate_s": (disk_b / (drive * 1e9) + up_b / (h2d * 1e9)) if drive else None,
                        "layer_wait_s": s.get("layer_wait_s"), "hits": s.get("hits"), "hit_rate": s.get("hit_rate"),
                        "per_moe_layer_s": t / nmoe, "extrapolated_92_layers_s_per_token": t / nmoe * 92}
if "steady" in plain and "steady" in block:
    out["block16"] = {"plain_steady": plain["steady"], "block_steady": block["steady"], "draft": block.get("draft"),
                      "block_time_over_16_plain_steps": plain["steady"] / block["steady"]}
if "steady" in res:
    spine = os.path.getsize(f"{M}/spine.gguf")
    active = 16 * nmoe * 17547264
    floor = (spine + active) / (hbm * 1e9) if hbm else None
    t = per_token(res)
    if "steady" in resblock:
        out["resident_block16"] = {"plain_steady": res["steady"], "block_steady": resblock["steady"],
                                   "block_time_over_16_plain_steps": res["steady"] / resblock["steady"], "draft": resblock.get("draft")}
    out["resident"] = {"steady_tok_s": res["steady"], "time_per_token_s": t, "spine_bytes": spine,
                       "active_expert_bytes": active, "hbm_floor_s": floor, "ratio_to_floor": t / floor if floor else None}
if "steady" in up1 and "steady" in plain:
    out["upload_streams"] = {"streams_8_steady": plain["steady"], "streams_1_steady": up1["steady"],
                             "layer_wait_s_8": plain.get("streaming", {}).get("layer_wait_s"),
                             "layer_wait_s_1": up1.get("streaming", {}).get("layer_wait_s")}
if "profile" in prof:
    out["resident_profile"] = prof["profile"]
if "op_profile" in pops:
    p = pops["op_profile"]
    out["resident_op_profile"] = {"busy_ms": p["busy_ms"], "span_ms": p["span_ms"], "steady_tok_s": pops.get("steady"),
                                  "top": sorted(([k, v["ms"], v["calls"]] for k, v in p["ops"].items()),
                                                key=lambda x: -x[1])[:25]}
print(json.dumps(out, indent=1))
EOF
tar czf "$OUT/results.tgz" -C "$R" . 2>/dev/null
stamp "done"
