#!/usr/bin/env bash
# Does federated fine-tuning pay (issue 21)? Four sites (Brown genres a / f / j / n, budgets
# 1.0 / 0.5 / 0.25 / 0.25) that each hold only a few documents of their genre (--train-docs
# training documents and --site-val-docs documents as their own validation split, drawn by the
# seed), over several seeds. Each seed is one paired trial: the same base model, documents and
# batches for every method. Per method and site, the gain over the base model and over training
# alone (percent of the reference's bpb on the genre's held-out documents), averaged over seeds
# with its standard error; the same for the mean and the worst site. A method pays when every one
# of those gains exceeds two standard errors.
#
# Usage: bench/hydra/pays.sh [--quick] [--out FILE] [--no-results-md] [--from LOG]
#                            [-- EXTRA bench flags]
#   --quick          3 seeds instead of 5
#   --from LOG       tabulate the JSON lines ({"seed":...}) of an earlier run's output instead
#                    of running (EXTRA must then name the settings that run used; LOAD_NOTE, if
#                    set, says what the load was while it ran)
#   --out FILE       JSON (default bench/results/hydra-pays.json, quick: hydra-pays-quick.json)
#   --no-results-md  do not touch bench/RESULTS.md
#   EXTRA            flags that replace the same flags of the defaults below and add to them
#                    (e.g. -- --site-keeps last --outer-lr 1, or -- --rounds 32)
#   Environment: JOBS seeds at a time (default 1); RESULTS_SECTION, RESULTS_TITLE, RESULTS_BY
#   name the bench/RESULTS.md section, its heading and the script it credits (a caller's own
#   table, e.g. bench/finetune/small_sites.sh)
set -euo pipefail

cd "$(dirname "$0")/../.."
source bench/common.sh
PASS=()
for ((i = 1; i <= $#; ++i)); do
  if [[ ${!i} == "--" ]]; then PASS=("${@:i+1}"); set -- "${@:1:i-1}"; break; fi
done
FROM=""
for ((i = 1; i <= $#; ++i)); do
  if [[ ${!i} == "--from" ]]; then j=$((i + 1)); FROM=${!j}; set -- "${@:1:i-1}" "${@:i+2}"; break; fi
done
bench_args 2,23 "$@"

if [[ $QUICK == 1 ]]; then SEEDS=(1 2 3); OUT=${OUT:-bench/results/hydra-pays-quick.json}
else SEEDS=(1 2 3 4 5); OUT=${OUT:-bench/results/hydra-pays.json}; fi
MODEL=(--dim 64 --layers 4 --heads 4 --ffn 192 --ffn-blocks 4 --seq 64 --batch 8)
# Small data: two training documents (about 20 KB of text) and one validation document per site;
# 32 rounds of 20 steps of 8 x 64 tokens see each training byte about 14 times (a site alone
# overfits; each site keeps its best θ on its own split).
ARGS=(--base-steps 800 --rounds 32 --inner 20 --lr 3e-3 --eval-tokens 16384 --train-docs 2
      --site-val-docs 1 --removal-penalty 10 --methods base,local,local_full,full,hydra)
# The settings under test (defaults of this benchmark): each site keeps its best θ, FedAvg at
# outer lr 1.5, and Hydra weighs each site's update by tokens x (its forward share)^2
# (docs/hydra.md, "Verdict").
TESTED=(--site-keeps best-personal --outer-lr 1.5 --outer-momentum 0 --forward-share-power 2)
# A flag named in EXTRA replaces the same flag of MODEL, ARGS and TESTED (each of those takes a
# value), so EXTRA may change any setting (e.g. --rounds) and keeps the others; atoll refuses a
# flag given twice.
named_in_extra() {
  local f
  for f in "${PASS[@]}"; do [[ $f == "$1" || $f == "$1="* ]] && return 0; done
  return 1
}
drop_overridden() {
  local -n flags_ref=$1
  local kept=() i
  for ((i = 0; i < ${#flags_ref[@]}; i += 2)); do
    named_in_extra "${flags_ref[i]}" || kept+=("${flags_ref[i]}" "${flags_ref[i + 1]}")
  done
  flags_ref=("${kept[@]}")
}
drop_overridden MODEL
drop_overridden ARGS
drop_overridden TESTED
TESTED+=("${PASS[@]}")
RAW=$(mktemp)
trap 'rm -f "$RAW" "$RAW".*' EXIT
if [[ -n $FROM ]]; then
  grep '^{"seed":' "$FROM" > "$RAW"
else
  # JOBS seeds at a time (one kernel thread each; every seed is deterministic, so the rows do
  # not depend on JOBS), appended to RAW in seed order.
  run_seed() {
    "$ATOLL" bench hydra "${MODEL[@]}" "${ARGS[@]}" "${TESTED[@]}" --seed "$1" --threads 1 \
      --brown-dir "$BROWN_DIR" --json | sed "s/^{/{\"seed\":$1,/" > "$RAW.$1"
  }
  for ((i = 0; i < ${#SEEDS[@]}; i += ${JOBS:-1})); do
    pids=()
    for s in "${SEEDS[@]:i:${JOBS:-1}}"; do
      echo "seed $s" >&2
      run_seed "$s" & pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    for s in "${SEEDS[@]:i:${JOBS:-1}}"; do tee -a "$RAW" < "$RAW.$s"; rm -f "$RAW.$s"; done
  done
fi

python3 - "$RAW" "$OUT" "$QUICK" "$WRITE_MD" "${MODEL[*]} ${ARGS[*]} ${TESTED[*]}" "$FROM" "${LOAD_NOTE:-}" \
  "${RESULTS_SECTION:-}" "${RESULTS_TITLE:-}" "${RESULTS_BY:-bench/hydra/pays.sh}" <<'PYEOF'
import datetime, json, math, os, re, sys
raw, out, quick, write_md, flags = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1", sys.argv[5]
from_log, load_note, section_key, section_title, made_by = sys.argv[6:11]
def flag(name, default):
    m = re.search(r"--%s (\S+)" % name, flags)
    return m.group(1) if m else default
# The sites as --sites names them (genre:budget, atoll bench hydra's default when not given).
sites_flag = flag("sites", "a:1.0,f:0.5,j:0.25,n:0.25")
site_genres = [x.split(":")[0] for x in sites_flag.split(",")]
site_budgets = [x.split(":")[1] for x in sites_flag.split(",")]
rank = flag("lora-rank", "8")  # the LoRA rows' adapter rank
rows = [json.loads(l) for l in open(raw) if l.startswith("{")]
seeds = sorted({r["seed"] for r in rows})
by = {(r["seed"], r["method"]): r for r in rows}
order = ["base", "local", "local_full", "local_lora", "full", "lora", "heterofl", "fedrolex",
         "random", "hydra"]
alone_rows = ("local", "local_full", "local_lora")
# The row each method's "alone" gain answers to (as atoll bench hydra reports it).
def alone_of(m):
    return {"full": "local_full", "local_full": "local_full", "lora": "local_lora",
            "local_lora": "local_lora"}.get(m, "local")
methods = sorted(dict.fromkeys(r["method"] for r in rows),
                 key=lambda m: order.index(m) if m in order else len(order))
def stat(xs):
    n = len(xs); m = sum(xs) / n
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n) if n > 1 else float("inf")
    return {"mean": round(m, 4), "se": round(se, 4), "pays": m > 2 * se}
def pct(ref, x): return 100.0 * (ref - x) / ref
summary = {}
for m in methods:
    if m == "base": continue
    alone = alone_of(m)
    K = len(by[(seeds[0], m)]["site_val_bpb"])
    e = {"alone_reference": alone, "site_val_bpb": [], "gain_vs_base_percent": [],
         "gain_vs_local_percent": []}
    for k in range(K):
        e["site_val_bpb"].append(stat([by[(s, m)]["site_val_bpb"][k] for s in seeds]))
        e["gain_vs_base_percent"].append(stat([by[(s, m)]["gain_vs_base_percent"][k] for s in seeds]))
        e["gain_vs_local_percent"].append(stat([by[(s, m)]["gain_vs_local_percent"][k] for s in seeds]))
    for key in ("mean_bpb", "worst_bpb"):
        e[key] = stat([by[(s, m)][key] for s in seeds])
        e[key + "_gain_vs_base_percent"] = stat([pct(by[(s, "base")][key], by[(s, m)][key]) for s in seeds])
        e[key + "_gain_vs_local_percent"] = stat([pct(by[(s, alone)][key], by[(s, m)][key]) for s in seeds])
    # Pseudo-gradient bytes one site sends per round in fp32 (rows of atoll bench hydra that
    # carry them; 0 for the rows trained alone).
    if "bytes_per_round" in by[(seeds[0], m)]:
        e["bytes_per_round"] = by[(seeds[0], m)]["bytes_per_round"]
    e["pays"] = m not in alone_rows and all(
        g["pays"] for g in e["gain_vs_base_percent"] + e["gain_vs_local_percent"] +
        [e[k + "_gain_vs_" + r + "_percent"] for k in ("mean_bpb", "worst_bpb") for r in ("base", "local")])
    summary[m] = e
# Federated LoRA against full-parameter federated fine-tuning (issue 17: within 2% of its mean bpb
# at >= 20x fewer bytes per round): the paired per-seed difference of the mean bpb, in bpb and in
# percent of full's (> 0: LoRA is worse), and the ratio of the bytes one site sends per round.
lora_vs_full = None
if "lora" in summary and "full" in summary:
    lora_vs_full = {
        "mean_bpb_difference": stat([by[(s, "lora")]["mean_bpb"] - by[(s, "full")]["mean_bpb"] for s in seeds]),
        "mean_bpb_difference_percent": stat([-pct(by[(s, "full")]["mean_bpb"], by[(s, "lora")]["mean_bpb"]) for s in seeds])}
    if summary["lora"].get("bytes_per_round") and summary["full"].get("bytes_per_round"):
        lora_vs_full["bytes_per_round_ratio"] = round(
            summary["full"]["bytes_per_round"] / summary["lora"]["bytes_per_round"], 2)
# bench/finetune's row keys (issue 17) on the LoRA and full-parameter rows: the adapters' rank,
# the elements a site trains (its federated row's bytes per round / 4: updates travel in fp32,
# the same for the row trained alone) and one inner step's milliseconds, mean over sites (rows
# that report it; peak RSS is not measured per method: one process runs them all).
fed_of = {"lora": "lora", "local_lora": "lora", "full": "full", "local_full": "full"}
for r in rows:
    fed = fed_of.get(r["method"])
    if fed is None: continue
    r["rank"] = int(rank) if fed == "lora" else None
    fed_row = by.get((r["seed"], fed))
    if fed_row and fed_row.get("bytes_per_round"):
        r["trainable_params"] = fed_row["bytes_per_round"] // 4
    steps = [x for x in r.get("site_step_ms", []) if x > 0]
    if steps: r["step_ms"] = round(sum(steps) / len(steps), 2)
base_bpb = [stat([by[(s, "base")]["site_val_bpb"][k] for s in seeds]) for k in range(len(by[(seeds[0], "base")]["site_val_bpb"]))]
def cpu():
    try:
        for l in open("/proc/cpuinfo"):
            if l.startswith("model name"): return "%s, %d cores" % (l.split(":", 1)[1].strip(), os.cpu_count() or 0)
    except OSError: pass
    return "unknown CPU"
settings = {"flags": flags, "seeds": seeds, "machine": cpu(), "sites": sites_flag,
            "loadavg": open("/proc/loadavg").read().split()[:3]}
report = {"settings": settings, "rows": rows, "base_site_val_bpb": base_bpb, "summary": summary}
if lora_vs_full: report["lora_vs_full"] = lora_vs_full
json.dump(report, open(out, "w"), indent=1)
open(out, "a").write("\n")
f2 = lambda s: "%+.2f ± %.2f%s" % (s["mean"], s["se"], "" if s["pays"] else " ✗")
lora_on = "" if flag("lora-targets", "q,k,v,o") == "q,k,v,o" else " on " + flag("lora-targets", "")
names = {"local": "each site alone (Hydra subnetwork)", "local_full": "each site alone (full model)",
         "full": "plain DiLoCo, full model", "hydra": "Hydra",
         "lora": "federated LoRA r=%s%s" % (rank, lora_on), "local_lora": "each site alone (LoRA r=%s%s)" % (rank, lora_on)}
lines = ["| method | site bpb " + " / ".join(site_genres) + " (mean over seeds) | gain vs base %, per site | gain vs alone %, per site | mean: vs base / vs alone % | worst: vs base / vs alone % | pays |",
         "|---|---|---|---|---|---|---|",
         "| base model | %s | | | | | |" % " / ".join("%.4f" % b["mean"] for b in base_bpb)]
for m, e in summary.items():
    lines.append("| %s | %s | %s | %s | %s / %s | %s / %s | %s |" % (
        names.get(m, m), " / ".join("%.4f" % x["mean"] for x in e["site_val_bpb"]),
        "; ".join(f2(g) for g in e["gain_vs_base_percent"]),
        "; ".join(f2(g) for g in e["gain_vs_local_percent"]) if m not in alone_rows else "",
        f2(e["mean_bpb_gain_vs_base_percent"]), f2(e["mean_bpb_gain_vs_local_percent"]) if m not in alone_rows else "",
        f2(e["worst_bpb_gain_vs_base_percent"]), f2(e["worst_bpb_gain_vs_local_percent"]) if m not in alone_rows else "",
        "" if m in alone_rows else ("yes" if e["pays"] else "no")))
if lora_vs_full:
    d, dp = lora_vs_full["mean_bpb_difference"], lora_vs_full["mean_bpb_difference_percent"]
    lines += ["", "%s against plain DiLoCo (full model), mean bpb, paired over seeds: %+.4f ± %.4f bpb "
              "(%+.2f ± %.2f%% of full's; > 0: LoRA worse); bytes per round and site %d against %d (%sx fewer)." % (
                  names["lora"], d["mean"], d["se"], dp["mean"], dp["se"],
                  summary["lora"].get("bytes_per_round", 0), summary["full"].get("bytes_per_round", 0),
                  lora_vs_full.get("bytes_per_round_ratio", "?"))]
table = "\n".join(lines)
print("wrote %s (%d rows)" % (out, len(rows)))
print(table)
if write_md:
    key = section_key or ("hydra-pays-quick" if quick else "hydra-pays")
    title = section_title or "Does federated fine-tuning pay? Small-data sites"
    section = "\n".join([
        "<!-- %s:begin -->" % key,
        "## %s, %d seeds" % (title, len(seeds)) + (" (quick)" if quick else ""),
        "",
        "Measured %s on %s, %s, by `%s%s`; rows and "
        "paired statistics in `%s`." % (datetime.date.today().isoformat(), settings["machine"],
                                        load_note or ("load average %s %s" % (" ".join(settings["loadavg"]),
                                        "when the rows were tabulated (--from)" if from_log else "at the end of the run")),
                                        made_by, " --quick" if quick else "", out),
        "",
        "%d sites (Brown genres %s, budgets %s), each holding %s training documents and %s "
        "validation document(s) of its genre, drawn by the seed, over a base model trained %s steps "
        "on genres %s; bpb on the genre's held-out documents. Each seed" % (
            len(site_genres), " / ".join(site_genres), " / ".join(site_budgets),
            flag("train-docs", "all"), flag("site-val-docs", "0"), flag("base-steps", "150"),
            flag("base-genres", "bcdeghklmpr")) + " is a paired trial (same base model, documents and "
        "batches for every method). Gains are percent of the reference's bpb, mean ± standard error "
        "over seeds; ✗ marks a gain not above two standard errors. `alone` is the site's Hydra "
        "subnetwork trained alone (the full model alone for the plain DiLoCo row, its LoRA "
        "adapters alone for the federated LoRA row), with the same "
        "rounds, steps and end-of-training choice. Flags `%s`." % flags,
        "",
        table,
        "<!-- %s:end -->" % key,
    ])
    path = "bench/RESULTS.md"
    text = open(path).read()
    pat = re.compile(r"<!-- %s:begin -->.*?<!-- %s:end -->" % (key, key), re.S)
    text = pat.sub(lambda _: section, text) if pat.search(text) else text.rstrip("\n") + "\n\n" + section + "\n"
    open(path, "w").write(text)
    print("updated %s" % path)
PYEOF
