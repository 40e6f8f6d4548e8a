#!/usr/bin/env python3
"""Rows, paired gaps and the table of bench/compress/run.sh.

  report.py todo OUT SETTINGS_JSON RUN...     print the runs ("codec ef seed") OUT does not hold
  report.py add OUT SETTINGS_JSON SUMMARY codec ef seed    append one demo run's row to OUT
  report.py table OUT SETTINGS_JSON MD_KEY|-  recompute gaps and summaries; write the table

OUT holds {"settings", "rows", "summary"}. A row is one `atoll demo` run (codec, error_feedback,
seed, final_val_bpb, bytes_sent, bytes_up, ...). Rows are kept only while the settings (model,
schedule, optimizer, evaluation) are the same; a file with other settings is started afresh.

Gaps are paired: a codec's run is compared with the fp32 ("none") run of the same seed, because
one seed's final bpb moves by 1-3% under any perturbation of the trajectory. The summary per
(codec, error feedback) gives the mean, sample standard deviation, min and max of the gap over
the seeds that have both runs; the target (>= 16x fewer pushed bytes than fp32 at <= 1% higher
bpb) is met when the mean gap is <= 1% over at least 3 seeds; "confident" when the mean plus two
standard errors (sample std / sqrt(n)) is still <= 1%.
"""
import json
import math
import os
import re
import sys

SETTING_KEYS = ["nodes", "inner_steps", "rounds", "model", "lr", "outer_lr", "outer_momentum",
                "eval_tokens"]


def load(out, settings):
    if os.path.exists(out):
        d = json.load(open(out))
        old = d.get("settings", {})
        if all(old.get(k) == settings[k] for k in SETTING_KEYS):
            for r in d.get("rows", []):
                r.setdefault("seed", 1234)  # the first table (one seed) ran with 1234
            return d
        print("%s has other settings; starting it afresh" % out, file=sys.stderr)
    return {"settings": settings, "rows": []}


def has(d, codec, ef, seed):
    return any(r["codec"] == codec and r["error_feedback"] == ef and r["seed"] == seed
               for r in d["rows"])


def save(out, d):
    with open(out, "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")


def mean_std(xs):
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, s


def table(out, settings, md_key):
    d = load(out, settings)
    rows = d["rows"]
    ref = {r["seed"]: r for r in rows if r["codec"] == "none"}
    for r in rows:
        r.pop("meets_target", None)  # a per-run verdict of the one-seed table; now per summary
        base = ref.get(r["seed"])
        if base is None:
            continue
        r["bpb_vs_fp32_percent"] = round(100.0 * (r["final_val_bpb"] / base["final_val_bpb"] - 1), 3)
        r["up_reduction"] = round(base["bytes_up"] / r["bytes_up"], 2)
        r["total_reduction"] = round(base["bytes_sent"] / r["bytes_sent"], 3)
    order = []
    for r in rows:
        key = (r["codec"], r["error_feedback"])
        if key not in order:
            order.append(key)
    summary = []
    for codec, ef in order:
        group = sorted((r for r in rows if r["codec"] == codec and r["error_feedback"] == ef
                        and "bpb_vs_fp32_percent" in r), key=lambda r: r["seed"])
        if not group:
            continue
        gaps = [r["bpb_vs_fp32_percent"] for r in group]
        bpbs = [r["final_val_bpb"] for r in group]
        gm, gs = mean_std(gaps)
        bm, bs = mean_std(bpbs)
        up = group[0]["up_reduction"]
        sem = gs / math.sqrt(len(group)) if len(group) > 1 else float("inf")
        summary.append({
            "codec": codec, "error_feedback": ef, "seeds": [r["seed"] for r in group],
            "n_seeds": len(group), "final_val_bpb_mean": round(bm, 5), "final_val_bpb_std": round(bs, 5),
            "bpb_vs_fp32_percent_mean": round(gm, 3), "bpb_vs_fp32_percent_std": round(gs, 3),
            "bpb_vs_fp32_percent_min": min(gaps), "bpb_vs_fp32_percent_max": max(gaps),
            "bpb_vs_fp32_percent_sem": round(sem, 3) if len(group) > 1 else None,
            # Pushes have a fixed size per codec; pulls (sparse deltas when smaller) vary a little
            # with the run, so totals are means over the seeds.
            "bytes_sent": round(sum(r["bytes_sent"] for r in group) / len(group)),
            "bytes_up": group[0]["bytes_up"], "up_reduction": up,
            "total_reduction": round(sum(r["total_reduction"] for r in group) / len(group), 3),
            "meets_target": codec != "none" and len(group) >= 3 and up >= 16 and gm <= 1.0,
            "meets_target_confident": codec != "none" and len(group) >= 3 and up >= 16 and
                                      gm + 2 * sem <= 1.0,
        })
    d["summary"] = summary
    d["settings"]["seeds"] = sorted({r["seed"] for r in rows})
    save(out, d)

    def mb(x):
        return "%.2f MB" % (x / 1e6)

    lines = [
        "| codec | error feedback | seeds | mean bpb | bpb vs fp32: mean ± std | mean + 2 SEM "
        "| min / max | up (Δ pushes) | up vs fp32 | total vs fp32 | ≥16× up at ≤1% bpb (mean) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        ef = "n/a" if s["codec"] == "none" else ("on" if s["error_feedback"] else "off")
        upper = ("%+.2f%%" % (s["bpb_vs_fp32_percent_mean"] + 2 * s["bpb_vs_fp32_percent_sem"])
                 if s["bpb_vs_fp32_percent_sem"] is not None and s["codec"] != "none" else "—")
        verdict = ("—" if s["codec"] == "none" else
                   "**yes** (confident)" if s["meets_target_confident"] else
                   "**yes**" if s["meets_target"] else "no")
        if s["codec"] == "none":
            gap = spread = "—"
        elif s["n_seeds"] == 1:
            gap, spread = "%+.2f%% (one seed)" % s["bpb_vs_fp32_percent_mean"], "—"
        else:
            gap = "%+.2f%% ± %.2f" % (s["bpb_vs_fp32_percent_mean"], s["bpb_vs_fp32_percent_std"])
            spread = "%+.2f%% / %+.2f%%" % (s["bpb_vs_fp32_percent_min"],
                                           s["bpb_vs_fp32_percent_max"])
        lines.append("| %s | %s | %d | %.4f | %s | %s | %s | %s | %.1f× | %.2f× | %s |" % (
            s["codec"], ef, s["n_seeds"], s["final_val_bpb_mean"], gap, upper, spread,
            mb(s["bytes_up"]), s["up_reduction"], s["total_reduction"], verdict))
    text = "\n".join(lines)
    print(text)
    if md_key == "-":
        return
    quick = md_key.endswith("quick")
    st = d["settings"]
    section = "\n".join([
        "<!-- %s:begin -->" % md_key,
        "## Codec convergence" + (" (quick)" if quick else ""),
        "",
        "Measured 2026-11-29 on %s (shared with other work while it ran), by "
        "`bench/compress/run.sh%s`; rows (one per run) and summaries in `%s`." % (
            st["machine"], " --quick" if quick else "", out),
        "",
        "DiLoCo, %d nodes on Brown (different genres per site), %d rounds × %d inner steps, model "
        "`%s` (byte vocabulary), inner AdamW lr %s, outer Nesterov lr %s, momentum %s. Seeds %s "
        "(each seed changes the model init and the data order). Final validation bpb on %d "
        "held-out tokens. \"bpb vs fp32\" is paired: each run against the `none` run (fp32 Δ) of "
        "the same seed; mean ± sample std, min / max over the seeds. Bytes are measured by the "
        "coordinator: total = θ pulls (fp32, the same for every row) + Δ pushes (\"up\", what "
        "the codec encodes). Target: ≥ 16× fewer bytes than fp32 pseudo-gradients (up) at ≤ 1%% "
        "higher bpb, here read as a mean gap ≤ 1%% over ≥ 3 seeds (\"confident\": the mean plus "
        "two standard errors is ≤ 1%% too)." % (
            st["nodes"], st["rounds"], st["inner_steps"], st["model"], st["lr"], st["outer_lr"],
            st["outer_momentum"], ", ".join(str(s) for s in st["seeds"]), st["eval_tokens"]),
        "",
        text,
        "<!-- %s:end -->" % md_key,
    ])
    path = "bench/RESULTS.md"
    doc = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    pat = re.compile(r"<!-- %s:begin -->.*?<!-- %s:end -->" % (md_key, md_key), re.S)
    if pat.search(doc):
        doc = pat.sub(lambda _: section, doc)
    else:
        doc = doc.rstrip("\n") + "\n\n" + section + "\n"
    open(path, "w").write(doc)
    print("updated %s (section %s)" % (path, md_key))


def main():
    cmd, out, settings = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if cmd == "todo":
        d = load(out, settings)
        for r in sys.argv[4:]:
            codec, ef, seed = r.split()
            if not has(d, codec, ef == "on", int(seed)):
                print(r)
    elif cmd == "add":
        summary, codec, ef, seed = sys.argv[4], sys.argv[5], sys.argv[6] == "on", int(sys.argv[7])
        s = json.load(open(summary))
        d = load(out, settings)
        d["rows"] = [r for r in d["rows"]
                     if not (r["codec"] == codec and r["error_feedback"] == ef and r["seed"] == seed)]
        d["rows"].append({
            "codec": codec, "error_feedback": ef, "seed": seed,
            "final_val_bpb": s["final_val_bpb"], "initial_val_bpb": s["initial_val_bpb"],
            "bytes_sent": s["bytes_sent"], "bytes_up": s["bytes_up"],
            "bytes_down": s["bytes_down"], "wall_s": s["wall_s"],
        })
        save(out, d)
    elif cmd == "table":
        table(out, settings, sys.argv[4])
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
