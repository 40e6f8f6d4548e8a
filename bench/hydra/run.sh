#!/usr/bin/env bash
# Hydra benchmark (issue 7, "Benchmark"): four sites with budgets 1.0, 0.5, 0.25, 0.25 on
# different Brown genres (a, f, j, n) fine-tune one base model (trained first on the other
# genres) with five methods: full model everywhere (ignores budgets), HeteroFL width slicing,
# FedRolex rolling windows, random layers + units at equal budget, Hydra. Two reference rows
# answer a site owner: the base model untouched, and each site's Hydra subnetwork trained on
# its own data alone for the same steps; every row gives each site's gain over both. Same base model,
# rounds, data, seed for every method. Per site: validation bpb on its own genre, FLOPs fraction
# (counted by the subnetwork model), buffer memory and step time; mean and worst site.
#
# The sites run in one process (`atoll bench hydra`) with the coordinator's aggregation code;
# the distributed path is tested separately (tests/integration/hydra_process_test.cc).
#
# Usage: bench/hydra/run.sh [--quick] [--out FILE] [--no-results-md]
#   --quick          fewer rounds and base steps (within 10 minutes on 2 cores)
#   --out FILE       JSON (default bench/results/hydra.json, quick: hydra-quick.json)
#   --no-results-md  do not touch bench/RESULTS.md
set -euo pipefail

cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,16 "$@"

if [[ $QUICK == 1 ]]; then
  ARGS=(--base-steps 800 --rounds 6 --inner 20 --lr 3e-3 --eval-tokens 16384)
  OUT=${OUT:-bench/results/hydra-quick.json}
else
  ARGS=(--base-steps 1500 --rounds 10 --inner 25 --lr 3e-3 --eval-tokens 32768)
  OUT=${OUT:-bench/results/hydra.json}
fi
MODEL=(--dim 64 --layers 4 --heads 4 --ffn 192 --ffn-blocks 4 --seq 64 --batch 8)
# Hydra's selection weighs the removal damage of a unit 10x its training value (docs/hydra.md,
# "Selection objective"); the random baseline draws its units with the plain objective (0).
HYDRA=(--removal-penalty 10)
RAW=$(mktemp)
trap 'rm -f "$RAW"' EXIT
"$ATOLL" bench hydra "${MODEL[@]}" "${ARGS[@]}" "${HYDRA[@]}" --threads 1 --brown-dir "$BROWN_DIR" --json \
  | tee "$RAW"

python3 - "$RAW" "$OUT" "$QUICK" "$WRITE_MD" "${MODEL[*]} ${ARGS[*]} ${HYDRA[*]}" <<'PYEOF'
import datetime, json, os, re, sys
raw, out, quick, write_md, flags = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1", sys.argv[5]
rows = [json.loads(l) for l in open(raw) if l.startswith("{")]
def cpu():
    name = "unknown CPU"
    try:
        for l in open("/proc/cpuinfo"):
            if l.startswith("model name"):
                name = l.split(":", 1)[1].strip(); break
    except OSError:
        pass
    return "%s, %d cores" % (name, os.cpu_count() or 0)
by = {r["method"]: r for r in rows}
h = by.get("hydra")
verdict = {}
if h:
    for m in ("heterofl", "fedrolex", "random"):
        if m in by:
            verdict[m] = {"mean": h["mean_bpb"] < by[m]["mean_bpb"],
                          "worst": h["worst_bpb"] < by[m]["worst_bpb"]}
settings = {"flags": flags, "quick": quick, "machine": cpu(), "outer_lr": 1.0,
            "outer_momentum": 0.0, "sites": "a:1.0,f:0.5,j:0.25,n:0.25",
            "base_genres": "bcdeghklmpr"}

names = {"base": "0. base model, no fine-tuning", "local": "0. each site alone (its Hydra subnetwork, same steps)",
         "full": "1. full model (ignores budgets)", "heterofl": "2. HeteroFL width slicing",
         "fedrolex": "3. FedRolex rolling window", "random": "4. random layers + units",
         "hydra": "5. Hydra"}
fmt = lambda xs, f: " / ".join(f % x for x in xs)
lines = ["| method | site bpb (a / f / j / n) | mean | worst | gain vs base % | gain vs alone % | FLOPs fraction | buffer MB | step ms |",
         "|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    trained = r["method"] not in ("base", "local")
    lines.append("| %s | %s | %.4f | %.4f | %s | %s | %s | %s | %s |" % (
        names.get(r["method"], r["method"]), fmt(r["site_val_bpb"], "%.4f"), r["mean_bpb"],
        r["worst_bpb"], fmt(r["gain_vs_base_percent"], "%+.2f"),
        fmt(r["gain_vs_local_percent"], "%+.2f"),
        fmt(r["site_flops_fraction"], "%.2f") if trained else "",
        fmt(r["site_peak_mem_mb"], "%.1f") if trained else "",
        fmt(r["site_step_ms"], "%.1f") if trained else ""))
# A site joins only if it ends better than its base model and than training alone.
pays = {r["method"]: {"every_site_beats_base": all(g > 0 for g in r["gain_vs_base_percent"]),
                      "every_site_beats_alone": bool(r["gain_vs_local_percent"]) and
                      all(g > 0 for g in r["gain_vs_local_percent"])}
        for r in rows if r["method"] not in ("base", "local")}
table = "\n".join(lines)
json.dump({"settings": settings, "rows": rows, "hydra_beats": verdict, "federation_pays": pays},
          open(out, "w"), indent=1)
open(out, "a").write("\n")
print("wrote %s (%d rows)" % (out, len(rows)))
print(table)
vtext = "; ".join("vs %s: mean %s, worst %s" % (m, "better" if v["mean"] else "NOT better",
                  "better" if v["worst"] else "NOT better") for m, v in verdict.items())
if write_md:
    key = "hydra-quick" if quick else "hydra"
    section = "\n".join([
        "<!-- %s:begin -->" % key,
        "## Hydra subnetworks" + (" (quick)" if quick else ""),
        "",
        "Measured %s on %s (shared with other work while it ran: step times are noisy), "
        "by `bench/hydra/run.sh%s`; rows in `%s`." % (datetime.date.today().isoformat(),
                                                      settings["machine"], " --quick" if quick else "", out),
        "",
        "Four sites, budgets 1.0 / 0.5 / 0.25 / 0.25 on Brown genres a / f / j / n, fine-tuning a "
        "base model trained on the other genres; flags `%s`; outer step lr 1.0, momentum 0 "
        "(FedAvg of the masked pseudo-gradients, per element over the holders); Hydra's "
        "selection subtracts 10x the importance of the units a site removes from its forward "
        "pass (`hydra.removal_penalty`, docs/hydra.md). Sites run "
        "in-process with the coordinator's aggregation code. bpb = validation bits per byte of "
        "the global model on the site's own genre. FLOPs fraction = counted training FLOPs of the "
        "site's step / full model (6P + 12LCT). Buffer MB = θ copy + gradient + optimizer state + "
        "activations the site allocates. The embedding is frozen for every method." % flags,
        "",
        table,
        "",
        "Hydra " + (vtext or "n/a") + ".",
        "",
        "Does federation pay (every site better than its base model / than training alone)? " +
        "; ".join("%s: %s / %s" % (m, "yes" if v["every_site_beats_base"] else "no",
                                   "yes" if v["every_site_beats_alone"] else "no")
                  for m, v in pays.items()) + ".",
        "<!-- %s:end -->" % key,
    ])
    path = "bench/RESULTS.md"
    text = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    pat = re.compile(r"<!-- %s:begin -->.*?<!-- %s:end -->" % (key, key), re.S)
    text = pat.sub(lambda _: section, text) if pat.search(text) else text.rstrip("\n") + "\n\n" + section + "\n"
    open(path, "w").write(text)
    print("updated %s" % path)
PYEOF
