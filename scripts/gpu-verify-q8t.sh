#!/usr/bin/env bash
# Verify blocks with and without the q8_0 tiles (issue 14): drafted decoding on a resident full-width K3.1
# slice (LAYERS, default 2: 1 dense + 1 MoE layer) with the replay drafter at 100 % and 50 % acceptance
# (blocks of up to 16 rows) against plain decoding, each with the default build (q8_0 tiles) and with
# FERRY_Q8T=0 (the row layout). Prints steady tok/s and each drafted run's logit hashes against its
# plain run's (identical = the verify blocks gave the plain steps' bits). One device call (~3 min):
# `bash scripts/gpu-bundle.sh` here, carry [".bundle"], `bash scripts/gpu-verify-q8t.sh`.
set -uo pipefail
source "$(dirname "$0")/gpu-env.sh"
F="$B/bin/ferry"; D=/dev/shm/ferry-verify; R=$OUT/verify-q8t
rm -rf "$D"; mkdir -p "$D" "$R"; trap 'rm -rf "$D"' EXIT
exec > >(tee "$OUT/verify-q8t.log") 2>&1
P="The three main financial statements are"
synth_slice "${LAYERS:-2}" "$D/model" "$D/e" || exit 1
for layout in tiles rowq8; do
  E=(); [ $layout = rowq8 ] && E=(FERRY_Q8T=0)
  for arm in plain r100 r50; do
    X=()
    [ $arm = r100 ] && X=(--draft "replay:$R/$layout-replay.json,rate=1.0" --draft-gate 0.5)
    [ $arm = r50 ] && X=(--draft "replay:$R/$layout-replay.json,rate=0.5" --draft-gate 0.5)
    env "${E[@]}" timeout 120 "$F" run -m "$D/model" --backend cuda -p "$P" -n "${N:-129}" --ignore-eos --json \
      --trace-hash "$R/$layout-$arm.hash" "${X[@]}" > "$R/$layout-$arm.json" 2> "$R/$layout-$arm.err"
    echo "$layout $arm exit $?"
    [ $arm = plain ] && python3 -c "import json; j=json.load(open('$R/$layout-plain.json')); json.dump({'prompt_ids': j['prompt_ids'], 'generated_ids': j['ids']}, open('$R/$layout-replay.json','w'))"
  done
done
python3 - "$R" <<'PY' | tee "$OUT/verify-q8t.txt"
import json, sys, filecmp
R = sys.argv[1]
rate = {}
for layout in ("tiles", "rowq8"):
    for arm in ("plain", "r100", "r50"):
        try: j = json.load(open(f"{R}/{layout}-{arm}.json"))
        except Exception: print(f"{layout} {arm}: no result"); continue
        rate[layout, arm] = j["steady"]
        d = j.get("draft") or {}
        same = filecmp.cmp(f"{R}/{layout}-{arm}.hash", f"{R}/{layout}-plain.hash", shallow=False)
        print(f"{layout:6s} {arm:6s} {j['steady']:8.1f} tok/s  x{j['steady'] / rate.get((layout, 'plain'), j['steady']):.3f} vs plain  "
              f"blocks {d.get('blocks')} accepted {d.get('accepted')}  logits {'identical to plain' if same else 'DIFFER'}")
for arm in ("plain", "r100", "r50"):
    if ("tiles", arm) in rate and ("rowq8", arm) in rate:
        print(f"tiles / rowq8, {arm}: {rate['tiles', arm] / rate['rowq8', arm]:.3f}")
PY
