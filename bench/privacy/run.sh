#!/usr/bin/env bash
# Differential privacy: validation bpb against epsilon. `atoll simulate` of the demo model
# (dim 128, 4 layers, 0.8M parameters) with SITES sites, the same seed and data for every run:
# one run without [privacy] (token-weighted mean, default screening), one with clipping only
# (z = 0, epsilon = inf) and one per noise multiplier z. Every site takes part in every round
# (q = 1); epsilon at delta = 1e-5 after the last round, from the coordinator's round record.
#
#   bench/privacy/run.sh [--quick] [--out FILE] [--no-results-md]
#
# Default: 8 sites, 6 rounds x 10 inner steps, clip norm CLIP = 5 (about the updates' norms, 4 to
# 8 in the first rounds of the demo), z in 0.01 0.1 1 (about 5 minutes on
# 2 cores). --quick: 4 sites, 3 rounds x 5 steps, z in 1. Writes bench/results/privacy.json
# (--quick: privacy-quick.json; or --out) and, unless --no-results-md, the table into
# bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,14 "$@"

if [[ $QUICK == 1 ]]; then SITES=4; ROUNDS=3; INNER=5; NOISES="1"; else SITES=8; ROUNDS=6; INNER=10; NOISES="0.01 0.1 1"; fi
CLIP=${CLIP:-5}
DELTA=1e-5
if [[ -z $OUT ]]; then
  if [[ $QUICK == 1 ]]; then OUT=bench/results/privacy-quick.json; else OUT=bench/results/privacy.json; fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # name, extra flags...
  local name=$1
  shift
  echo "privacy: $name ..." >&2
  # The codecs of the committed results (the demo's defaults before 2026-12-02).
  "$ATOLL" simulate --nodes "$SITES" --rounds "$ROUNDS" --inner-steps "$INNER" --http off \
    --codec none --pull-codec exact --eval-tokens 16384 --brown-dir "$BROWN_DIR" --store "$work/run-$name" \
    --summary-json "$work/summary-$name.json" "$@" > "$work/log-$name.txt" 2>&1 ||
    { cat "$work/log-$name.txt" >&2; exit 1; }
}

run none
run clip-only --dp-clip "$CLIP" --dp-noise 0 --dp-delta "$DELTA"
for z in $NOISES; do run "z$z" --dp-clip "$CLIP" --dp-noise "$z" --dp-delta "$DELTA"; done

python3 - "$OUT" "$WRITE_MD" "$SITES" "$ROUNDS" "$INNER" "$CLIP" "$DELTA" "$work" none clip-only \
  $(for z in $NOISES; do echo "z$z"; done) <<'PY'
import datetime, json, os, re, sys
out, write_md, sites, rounds, inner, clip, delta, work = sys.argv[1:9]
names = sys.argv[9:]
rows = []
for name in names:
    s = json.load(open(os.path.join(work, f"summary-{name}.json")))
    private = "privacy_clip_norm" in s
    eps = s.get("privacy_epsilon") if private else None
    rows.append({"run": name, "privacy": private,
                 "clip_norm": s.get("privacy_clip_norm"),
                 "noise_multiplier": s.get("privacy_noise_multiplier"),
                 "delta": s.get("privacy_delta"),
                 "epsilon": eps,  # null: infinite (clipping only) or no privacy
                 "final_val_bpb": s["final_val_bpb"], "initial_val_bpb": s["initial_val_bpb"],
                 "final_fingerprint": s["final_fingerprint"], "wall_s": s["wall_s"]})
doc = {"date": datetime.date.today().isoformat(), "sites": int(sites), "rounds": int(rounds),
       "inner_steps": int(inner), "clip_norm": float(clip), "delta": float(delta),
       "model": "demo: dim 128, 4 layers, 4 heads, ffn 384, seq 128, batch 8, seed 1234",
       "sampling_rate": 1.0, "accountant": "RDP, Balle et al. 2020 conversion (Opacus)",
       "rows": rows}
json.dump(doc, open(out, "w"), indent=1)

def eps_text(r):
    if not r["privacy"]:
        return "no DP"
    return "inf" if r["epsilon"] is None else f"{r['epsilon']:.3g}"

lines = ["| run | noise multiplier z | epsilon (delta 1e-5) | final val bpb |",
         "|---|---|---|---|"]
for r in rows:
    z = "-" if r["noise_multiplier"] is None else f"{r['noise_multiplier']:g}"
    lines.append(f"| {r['run']} | {z} | {eps_text(r)} | {r['final_val_bpb']:.4f} |")
table = "\n".join(lines)
print(table)
if write_md == "1":
    md_path = "bench/RESULTS.md"
    md = open(md_path).read()
    head = "## Differential privacy (bench/privacy)"
    body = (f"{head}\n\n`bench/privacy/run.sh`: `atoll simulate`, {sites} sites, {rounds} rounds x "
            f"{inner} inner steps, demo model, clip norm {clip}, every site in every round "
            f"(q = 1), epsilon at delta = {delta} after the last round (RDP accountant, Balle et "
            f"al. 2020 conversion). `none` is the run without `[privacy]` (token-weighted mean); "
            f"`clip-only` clips and averages with equal weights, without noise. "
            f"Results: `bench/results/privacy.json` ({doc['date']}).\n\n{table}\n\n"
            f"The noise on the mean has an L2 norm of about z·C·√d/n (d = 885,888 parameters, "
            f"n = {sites} sites), against at most C of signal: {941.2 / int(sites):.0f}·z times "
            f"the signal. An epsilon that means something (z ≈ 1) drowns the updates at this "
            f"site count; central DP needs hundreds to thousands of sites per round (McMahan et "
            f"al. 2018 use thousands), or far fewer parameters per update.\n")
    if head in md:
        start = md.index(head)
        nxt = md.find("\n## ", start + len(head))
        md = md[:start] + body + ("" if nxt < 0 else md[nxt:])
    else:
        md = md.rstrip("\n") + "\n\n" + body
    open(md_path, "w").write(md)
PY
