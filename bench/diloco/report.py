#!/usr/bin/env python3
# The JSON and the bench/RESULTS.md section of bench/diloco/run.sh, from its runs' summaries.
# Usage: report.py WORK OUT WRITE_MD QUICK LR OUTER_TABLE WARM TOTAL EVAL_TOKENS MODEL SEED
#                  GRID_S "split M H codec pull outer-lr outer-momentum"...
# WORK holds one summary per run, <split>-m<M>-h<H>-<codec>-<pull>.json, as run.sh names them
# (run.sh adds baseline_val_bpb where the data-parallel run was shared, run_s and events).
import json, os, platform, re, subprocess, sys

work, out, write_md, quick = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
lr, outer_table, warm, total, eval_tokens, model, seed, grid_s = sys.argv[5:13]
rows = []
for r in sys.argv[13:]:
    split, m, h, codec, pull = r.split()[:5]
    tag = "%s-m%s-h%s-%s-%s" % (split, m, h, re.sub(r"[:+]", "_", codec), pull)
    s = json.load(open(os.path.join(work, tag + ".json")))
    d, b = s["final_val_bpb"], s["baseline_val_bpb"]
    sent, ddp = s["bytes_sent"], s["ddp_bytes_equivalent"]
    gap = 100.0 * (d - b) / b
    over_h = ddp / sent / s["inner_steps"] if sent and ddp else None
    rows.append({
        "split": split, "nodes": s["nodes"], "inner_steps": s["inner_steps"],
        "rounds": s["rounds"], "codec": s["codec"], "pull_codec": s["pull_codec"],
        "outer_lr": s["outer_lr"], "outer_momentum": s["outer_momentum"],
        "warm_start": s["warm_start"],
        "initial_val_bpb": s["initial_val_bpb"], "diloco_val_bpb": d, "ddp_val_bpb": b,
        "ddp_trained_in_this_run": s["baseline_trained_here"], "gap_percent": round(gap, 3),
        "bytes_sent": sent, "bytes_up": s.get("bytes_up"), "bytes_down": s.get("bytes_down"),
        "ddp_bytes": ddp, "byte_ratio": round(ddp / sent, 3) if sent else None,
        "byte_ratio_over_h": round(over_h, 3) if over_h is not None else None,
        "within_4_percent": gap <= 4.0,
        "h_times_fewer_bytes": (over_h >= 1.0) if over_h is not None else None,
        "membership_events": s["events"], "wall_s": s["wall_s"], "run_s": s["run_s"],
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
    "min_lr": float(lr) / 10, "warmup_steps": 20, "warm_start_steps": int(warm),
    "outer_table": outer_table, "eval_tokens": int(eval_tokens), "seed": int(seed),
    "quick": quick, "machine": cpu(), "grid_wall_s": int(grid_s),
}
json.dump({"settings": settings, "rows": rows}, open(out, "w"), indent=1)
open(out, "a").write("\n")
print("wrote %s (%d rows)" % (out, len(rows)))

def mb(x):
    return "%.2f MB" % (x / 1e6)

def table(split):
    lines = [
        "| M | H | R | outer lr / momentum | push / pull | DiLoCo bpb | data-parallel bpb | gap "
        "| within 4% | DiLoCo bytes (up / down) | data-parallel bytes | ratio / H | ≥ H× fewer |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["split"] != split:
            continue
        none = r["ddp_bytes"] == 0
        lines.append("| %d | %d | %d | %g / %g | %s / %s | %.4f | %.4f | %+.2f%% | %s "
                     "| %s (%s / %s) | %s | %s | %s |" % (
            r["nodes"], r["inner_steps"], r["rounds"], r["outer_lr"], r["outer_momentum"],
            r["codec"], r["pull_codec"],
            r["diloco_val_bpb"], r["ddp_val_bpb"], r["gap_percent"],
            "yes" if r["within_4_percent"] else "**no**", mb(r["bytes_sent"]),
            mb(r["bytes_up"]), mb(r["bytes_down"]), mb(r["ddp_bytes"]),
            "—" if none else "%.2f" % r["byte_ratio_over_h"],
            "— (M = 1)" if none else ("yes" if r["h_times_fewer_bytes"] else "**no**")))
    return "\n".join(lines)

splits = []
for r in rows:
    if r["split"] not in splits:
        splits.append(r["split"])
for sp in splits:
    print(sp)
    print(table(sp))

if write_md:
    import datetime
    date = datetime.date.today().isoformat()
    warm_text = ("Every run starts from one base model, trained first for W = %s steps on all of "
                 "Brown (one worker, the same inner optimiser; a warm start, as the DiLoCo "
                 "paper's runs start from a pretrained model)." % warm if int(warm) > 0
                 else "Every run starts from the same random initialisation.")
    try:
        tune_seed = json.load(open(outer_table))["settings"]["seed"]
    except (OSError, KeyError, ValueError):
        tune_seed = "?"
    title = "DiLoCo vs data-parallel" + (" (quick)" if quick else "")
    key = "diloco-quick" if quick else "diloco"
    names = {"iid": "IID sites (every site samples all of Brown; the setting of the DiLoCo papers)",
             "genre": "Non-IID sites (each site its own Brown genres, as `make demo` runs it)"}
    parts = [
        "<!-- %s:begin -->" % key,
        "## " + title,
        "",
        "Measured %s on %s (shared with other work while it ran: timings are noisy, "
        "results are not, every run is deterministic), by `bench/diloco/run.sh%s`; rows in "
        "`%s`, the grid took %d s." % (date, settings["machine"], " --quick" if quick else "",
                                       out, int(grid_s)),
        "",
        "Model `%s` (byte vocabulary). %s T = %s inner steps per node for every H "
        "(R = T / H rounds), inner AdamW lr %s (cosine to %g over T, 20 warm-up steps), seed %s. "
        "Outer step per (M, H) as `bench/diloco/tune.sh` chose it on seed %s (`%s`), column "
        "\"outer\"; M = 1 rows use lr 1, momentum 0 (plain training on one node, the control). "
        "Validation bpb on %s held-out tokens of every Brown genre. Data-parallel: the same "
        "tokens (M × batch rows per step, the same sampling) from the same starting θ, same "
        "inner optimiser and schedule; it is trained once per (split, M) and shared by the rows "
        "with that M." % (model, warm_text, total, lr, float(lr) / 10, seed, tune_seed,
                          outer_table, eval_tokens),
        "",
        "Bytes: DiLoCo's are measured on the wire by the coordinator (every node pulls θ and "
        "pushes Δ each round, codec headers and chunk framing included). Data-parallel's are a "
        "ring all-reduce of fp32 gradients on every step, 2(M−1)·P·4 bytes per step in total "
        "over the M workers (0 for M = 1). Rows at M ≥ 2 push Δ as `int8` (with error "
        "feedback) and pull θ as dense `bf16`; fp32 both ways would give a ratio of only "
        "H·(M−1)/M. M = 1 rows are fp32 both ways.",
    ]
    for sp in splits:
        parts += ["", "### " + names.get(sp, sp), "", table(sp)]
    parts += ["", "<!-- diloco-reading:begin -->", "<!-- diloco-reading:end -->",
              "<!-- %s:end -->" % key]
    section = "\n".join(parts)
    path = "bench/RESULTS.md"
    text = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    # Keep a hand-written "reading the numbers" paragraph across re-runs.
    old = re.search(r"<!-- %s:begin -->.*?<!-- %s:end -->" % (key, key), text, re.S)
    if old:
        keep = re.search(r"<!-- diloco-reading:begin -->.*?<!-- diloco-reading:end -->",
                         old.group(0), re.S)
        if keep:
            section = re.sub(r"<!-- diloco-reading:begin -->.*?<!-- diloco-reading:end -->",
                             lambda _: keep.group(0), section, flags=re.S)
        text = text[:old.start()] + section + text[old.end():]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    open(path, "w").write(text)
    print("updated %s (section %r)" % (path, title))
