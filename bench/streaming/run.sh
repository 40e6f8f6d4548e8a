#!/bin/sh
# Streaming DiLoCo against plain DiLoCo on the same model, data and inner steps (`atoll demo
# --summary-json`, 2 sites over mTLS on loopback): final validation bpb, total bytes and peak
# bytes per sync, for P = 1 (plain), 2, 4 fragments and tau = 0, 5 overlapped inner steps.
# Writes bench/results/streaming.json and the "Streaming DiLoCo" table of bench/RESULTS.md.
# Usage: bench/streaming/run.sh [ATOLL_BINARY]   (from the repository root; a few minutes on
# 2 cores)
set -eu
atoll=${1:-build/atoll}
out=bench/results/streaming.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Small model (dim 128, 4 layers, 0.9M parameters), 2 sites, 5 outer rounds of H = 40 inner
# steps: every run trains the same 200 inner steps per site; streaming runs sync one fragment
# every H/P steps.
common="--nodes 2 --rounds 5 --inner-steps 40 --dim 128 --layers 4 --heads 4 --ffn 384 --seq 128
        --batch 8 --lr 3e-3 --eval-tokens 16384 --seed 7 --codec none --pull-codec exact"

rows=""
for cfg in "1 0" "2 0" "2 5" "4 0" "4 5"; do
  set -- $cfg
  p=$1 tau=$2
  echo "streaming bench: P=$p tau=$tau ..." >&2
  # Plain DiLoCo (P = 1, tau = 0) merges nothing, and refuses --merge-alpha.
  merge="--merge-alpha 0.5"
  [ "$p" = 1 ] && [ "$tau" = 0 ] && merge=""
  # shellcheck disable=SC2086
  "$atoll" demo $common --fragments "$p" --overlap "$tau" $merge \
    --store "$work/run-$p-$tau" --summary-json "$work/s-$p-$tau.json" > "$work/log-$p-$tau.txt"
  rows="$rows $work/s-$p-$tau.json"
done

# shellcheck disable=SC2086
jq -s '{bench: "streaming-diloco", date: "2026-11-29",
        machine: $machine, cores: 2,
        setup: "atoll demo: 2 sites (Brown genres, non-IID), dim 128, 4 layers, seq 128, batch 8, 5 outer rounds x H = 40 inner steps, codec none, merge alpha 0.5, mTLS loopback",
        rows: [.[] | {fragments, overlap_steps, merge_alpha, syncs, final_val_bpb,
                      bytes_sent, peak_bytes_per_sync, initial_pull_bytes,
                      plain_peak_bytes_per_sync, plain_bytes_sent, wall_s}]}' \
  --arg machine "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" $rows > "$out"
echo "wrote $out" >&2

# The table in bench/RESULTS.md, between the section heading and the next one.
table=$(jq -r '
  "| P | tau | syncs | final val bpb | total bytes | peak bytes / sync | peak vs plain | wall s |",
  "|---|---|---|---|---|---|---|---|",
  (.rows as $r | ($r[] | select(.fragments == 1 and .overlap_steps == 0) | .peak_bytes_per_sync) as $plain |
   $r[] | "| \(.fragments) | \(.overlap_steps) | \(.syncs) | \(.final_val_bpb) | \(.bytes_sent) | \(.peak_bytes_per_sync) | \((.peak_bytes_per_sync / $plain * 100 | floor)) % | \(.wall_s | floor) |")' "$out")
machine=$(jq -r .machine "$out")
section=$(cat <<MD
## Streaming DiLoCo

2026-11-29, $machine (2 shared cores, other jobs running), \`bench/streaming/run.sh\` (raw:
\`bench/results/streaming.json\`). 2 sites over mTLS on loopback, Brown genres (non-IID), a
small Llama (dim 128, 4 layers, 0.9M parameters, seq 128, batch 8), 5 outer rounds of H = 40
inner steps (200 inner steps per site in every run), codec none, merge alpha 0.5. P = 1 is
plain DiLoCo; with P fragments each sync moves one fragment (H/P inner steps apart) and pulls
are exact deltas against the θ the node holds. A sync is one round's pushes plus the pulls of
its result; the first pull of θ (the bootstrap, 2 × 4·numel) counts in the total, not in the
peak. tau = inner steps trained while each sync is in flight. Streaming moves the same bytes per
outer round as plain DiLoCo, spread over P syncs, plus the pulls after the last P − 1 syncs.
Wall time is noisy here (the cores are shared with other jobs; loopback hides the sync cost
that overlap is meant to hide).

$table
MD
)
results=bench/RESULTS.md
[ -f "$results" ] || printf '# Benchmark results\n' > "$results"
python3 - "$results" "$section" <<'PY'
import re, sys
path, section = sys.argv[1], sys.argv[2]
text = open(path).read()
pat = re.compile(r"^## Streaming DiLoCo\n.*?(?=^## |\Z)", re.S | re.M)
text = pat.sub(lambda m: section + "\n\n", text) if pat.search(text) else text.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(text)
PY
echo "updated $results" >&2
