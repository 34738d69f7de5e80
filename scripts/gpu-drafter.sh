#!/usr/bin/env bash
# Issue 13 item 5 on the H200: drafted decoding vs plain with the cost gate (the default), for the n-gram
# drafter and replay at 0-100 % acceptance, on (a) the full-width K3.1 slice with its experts streamed
# from tmpfs through caches at the reference machine's fractions (CUDA) and (b) the demo model resident
# on CUDA and on the CPU back-end. Arms interleaved, REPS repeats, medians; every drafted run's logit
# hashes are compared with its plain run's (replay50-ungated: every proposal verified, so many KDA
# rollbacks through the device snapshots). One device call (~4 min):
# `bash scripts/gpu-bundle.sh` here, then carry [".bundle"] and run `bash scripts/gpu-drafter.sh`.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
F="$B/bin/ferry"; D=$PWD/.benchdata-drafter; R=$D/results; S=/dev/shm/ferry-drafter
rm -rf "$D" "$S"; mkdir -p "$R" "$S"; trap 'rm -rf "$S"' EXIT
REPS=${REPS:-3}; P="The three main financial statements are"; SETUPS=${SETUPS:-stream cuda cpu}
if [[ " $SETUPS " == *" stream "* ]]; then
  synth_slice 2 "$D/slice" "$S"/e{0..3} || exit 1
fi
timeout 60 "$F" synth --arch kimi_k3 --out "$D/demo" --quiet || exit 1
EXB=17547264
declare -A SETUP=(
  [stream]="-m $D/slice --ssd-streaming --backend cuda --cache-experts 17 --host-pool $((33 * EXB))B -n ${NSTREAM:-129}"
  [cuda]="-m $D/demo --backend cuda -n ${NDEMO:-1025}"
  [cpu]="-m $D/demo --backend cpu -t 8 -n ${NDEMO:-1025}")
read -ra ARMS <<< "${ARMS:-plain replay0 replay25 replay50 replay75 replay100 ngram replay50-ungated}"
for setup in $SETUPS; do
  reps=$REPS; [ "$setup" = stream ] && reps=${REPS_STREAM:-$(( REPS > 2 ? 2 : REPS ))}  # each streamed run loads the slice
  # shellcheck disable=SC2086
  timeout 120 "$F" run ${SETUP[$setup]} -p "$P" --ignore-eos --json > "$R/$setup-ref.json" 2>/dev/null || { echo "$setup: reference failed"; continue; }
  python3 -c "import json; j=json.load(open('$R/$setup-ref.json')); json.dump({'prompt_ids': j['prompt_ids'], 'generated_ids': j['ids']}, open('$R/$setup-replay.json','w'))"
  for rep in $(seq 1 "$reps"); do
    for arm in "${ARMS[@]}"; do
      case $arm in
        plain) X=() ;;
        ngram) X=(--draft ngram) ;;
        replay50-ungated) X=(--draft "replay:$R/$setup-replay.json,rate=0.5" --draft-gate 0.5 --draft-cost-gate off) ;;
        replay*) r=${arm#replay}; X=(--draft "replay:$R/$setup-replay.json,rate=$(python3 -c "print($r/100)")" --draft-gate 0.5) ;;
      esac
      # shellcheck disable=SC2086
      timeout 120 "$F" run ${SETUP[$setup]} -p "$P" --ignore-eos --json --trace-hash "$R/$setup-$arm-$rep.hash" "${X[@]}" \
        > "$R/$setup-$arm-$rep.json" 2> "$R/$setup-$arm-$rep.err"
    done
  done
done
python3 - "$R" "$REPS" <<'PY' | tee "$OUT/drafter.txt"
import json, statistics, sys, filecmp
R, reps = sys.argv[1], int(sys.argv[2])
for setup in ("stream", "cuda", "cpu"):
    print(f"== {setup}")
    rates = {}
    for arm in ("plain", "replay0", "replay25", "replay50", "replay75", "replay100", "ngram", "replay50-ungated"):
        v, d, same = [], {}, True
        for r in range(1, reps + 1):
            try: j = json.load(open(f"{R}/{setup}-{arm}-{r}.json"))
            except Exception: continue
            if not j.get("steady"): continue
            v.append(j["steady"]); d = j.get("draft") or {}
            same &= filecmp.cmp(f"{R}/{setup}-{arm}-{r}.hash", f"{R}/{setup}-plain-1.hash", shallow=False)
        if not v:
            if arm == "plain": break
            print(f"  {arm:10s} no runs"); continue
        rates[arm] = statistics.median(v)
        x = rates[arm] / rates["plain"] if "plain" in rates else float("nan")
        print(f"  {arm:10s} median {rates[arm]:8.2f} tok/s  x{x:.3f}  runs {[round(a, 1) for a in v]}  "
              f"blocks {d.get('blocks')} accepted {d.get('accepted')} calls {d.get('calls')} gated {d.get('cost_gated')}  "
              f"logits {'identical' if same else 'DIFFER'}")
PY
tar czf "$OUT/drafter.tgz" -C "$R" .
