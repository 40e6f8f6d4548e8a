"""bench/robust's report: rows of the runs just made (merged into the existing JSON when only a
part was run), the paired-seed summary per (setting, sites, attack), bench/results/robust.json
and the "Attacks on aggregation" table of bench/RESULTS.md.

  report.py OUT WRITE_MD ROUNDS INNER EVAL_TOKENS WORK MERGE REUSE_HONEST NAME...

NAME: setting:sites:byzantine:attack:seed, one per run; WORK holds summary-<name>.json (atoll
simulate's --summary-json) and load-<name> (the 1-minute load average when the run ended).

Each seed is a paired trial: an attacked run is compared with the honest run of the same
setting, site count and seed, gap = (attacked - honest) / honest. The verdict of a summary:
`default` meets the target when mean + 2 s.e. of the gaps <= 2% (a single seed: its gap);
`mean-no-screening` shows a real attack when a seed diverged or the mean gap >= 10%.
"""
import datetime
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from report_util import mean_se  # noqa: E402

DEFAULT_SEED = 1234  # the seed of every row written before paired seeds (rows without `seed`)
TARGET_DEFAULT = 0.02
TARGET_REAL = 0.10


def finite(x):
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def key(r):
    return (r["setting"], r["sites"], r["byzantine"], r["attack"], r["seed"])


def read_summaries(work, runs, out, reuse_honest):
    summaries = {}
    for setting, sites, byz, attack, seed in runs:
        name = f"{setting}-{sites}-{byz}-{attack}-{seed}"
        s = json.load(open(os.path.join(work, f"summary-{name}.json")))
        load_path = os.path.join(work, f"load-{name}")
        if os.path.exists(load_path):
            s["load_average"] = float(open(load_path).read().split()[0])
        host_path = os.path.join(work, "host")  # `atoll --version`'s cpu line (run.sh)
        if os.path.exists(host_path):
            s["host"] = open(host_path).read().strip()
        summaries[(setting, int(sites), int(byz), attack, int(seed))] = s
    if reuse_honest == "1":
        for r in json.load(open(out))["rows"]:
            k = (r["setting"], r["sites"], 0, "none", r.get("seed", DEFAULT_SEED))
            if r["byzantine"] == 0 and k not in summaries:
                summaries[k] = {"final_val_bpb": r["final_val_bpb"], "reused": True}
    return summaries


def make_rows(summaries):
    rows = []
    for (setting, sites, byz, attack, seed), s in summaries.items():
        if s.get("reused"):
            continue  # the existing honest row stays as it is
        honest = summaries.get((setting, sites, 0, "none", seed), {})
        final, ref = s.get("final_val_bpb"), honest.get("final_val_bpb")
        rel = (final - ref) / ref if finite(final) and finite(ref) else None
        rows.append({"aggregator": s["aggregator"], "screen": s["screen"],
                     "norm_multiple": s["norm_multiple"], "setting": setting, "attack": attack,
                     "byzantine": byz, "sites": sites, "seed": seed, "final_val_bpb": final,
                     "honest_val_bpb": ref, "relative_to_honest": rel,
                     "initial_val_bpb": s.get("initial_val_bpb"),
                     "updates_clipped": s.get("updates_clipped"),
                     "updates_dropped": s.get("updates_dropped"),
                     "updates_replayed": s.get("updates_replayed"),
                     "updates_stale": s.get("updates_stale"),
                     "max_norm_ratio": s.get("max_norm_ratio"),
                     "final_fingerprint": s["final_fingerprint"], "wall_s": s["wall_s"],
                     "load_average": s.get("load_average"), "host": s.get("host"),
                     "failed": s.get("failed")})
    return rows


def merge_rows(out, rows):
    """The rows just made replace those of the same key in the existing JSON; the others stay."""
    previous = json.load(open(out))["rows"]
    for r in previous:
        r.setdefault("seed", DEFAULT_SEED)
    fresh = {key(r): r for r in rows}
    for r in previous:
        # An honest run gives the same θ again (same config and seed): say so if it did not.
        same = fresh.get(key(r))
        if r["byzantine"] == 0 and same and same["final_fingerprint"] != r["final_fingerprint"]:
            print(f"robust: honest run {key(r)} changed: {r['final_fingerprint']} -> "
                  f"{same['final_fingerprint']}", file=sys.stderr)
    old_keys = {key(p) for p in previous}
    order = [key(r) for r in previous] + [key(r) for r in rows if key(r) not in old_keys]
    by_key = {key(r): r for r in previous}
    by_key.update(fresh)
    return [by_key[k] for k in order]


def row_verdict(r):
    if r["byzantine"] == 0:
        return "honest"
    if r["attack"] == "absent":
        return "reference (attackers absent)"
    rel = r["relative_to_honest"]
    if r["setting"] == "default":
        return "ok" if rel is not None and rel <= TARGET_DEFAULT else "MISSED (> 2%)"
    return "attack real" if rel is None or rel >= TARGET_REAL else "attack NOT real (< 10%)"


def summarize(rows):
    """One entry per (setting, sites, byzantine, attack): the paired gaps over its seeds."""
    groups = {}
    for r in rows:
        groups.setdefault((r["setting"], r["sites"], r["byzantine"], r["attack"]), []).append(r)
    # `absent` (the attacker sites never join) per (setting, sites, seed): what an aggregator
    # that leaves the attackers out at best achieves.
    absent = {(r["setting"], r["sites"], r["seed"]): r["final_val_bpb"] for r in rows
              if r["attack"] == "absent" and finite(r["final_val_bpb"])}
    out = []
    for (setting, sites, byz, attack), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        vs_absent = [(r["final_val_bpb"] - absent[(setting, sites, r["seed"])])
                     / absent[(setting, sites, r["seed"])] for r in rs
                     if byz > 0 and attack != "absent" and finite(r["final_val_bpb"])
                     and (setting, sites, r["seed"]) in absent]
        mean_absent, se_absent = mean_se(vs_absent) if vs_absent else (None, None)
        gaps = [r["relative_to_honest"] for r in rs if r["relative_to_honest"] is not None]
        diverged = [r["seed"] for r in rs if not finite(r["final_val_bpb"])]
        mean, se = mean_se(gaps) if gaps else (None, None)
        se = None if se is None or not math.isfinite(se) else se
        bound = None if mean is None else mean + 2 * (se or 0)
        finals = [r["final_val_bpb"] for r in rs if finite(r["final_val_bpb"])]
        refs = [r["honest_val_bpb"] for r in rs if finite(r["honest_val_bpb"])]
        dropped = [r["updates_dropped"] for r in rs if r["updates_dropped"] is not None]
        if byz == 0:
            verdict = "honest"
        elif attack == "absent":
            verdict = "reference (attackers absent)"
        elif setting == "default":
            verdict = ("MISSED (diverged)" if diverged else
                       "MISSED (no honest pair)" if bound is None else
                       ("ok" if bound <= TARGET_DEFAULT else "MISSED (> 2%)")
                       + (" (1 seed)" if se is None else ""))
        else:
            verdict = ("attack real" if diverged or (mean is not None and mean >= TARGET_REAL)
                       else "attack NOT real (< 10%)")
        out.append({"setting": setting, "sites": sites, "byzantine": byz, "attack": attack,
                    "seeds": [r["seed"] for r in rs], "diverged_seeds": diverged,
                    "gaps": [r["relative_to_honest"] for r in rs],
                    "mean_final_val_bpb": sum(finals) / len(finals) if finals else None,
                    "mean_honest_val_bpb": sum(refs) / len(refs) if refs else None,
                    "mean_gap": mean, "se_gap": se, "mean_plus_2se": bound,
                    "absent_seeds": len(vs_absent), "mean_gap_vs_absent": mean_absent,
                    "se_gap_vs_absent": (se_absent if se_absent is not None
                                         and math.isfinite(se_absent) else None),
                    "mean_updates_dropped": sum(dropped) / len(dropped) if dropped else None,
                    "verdict": verdict})
    attack_order = ["none", "sign-flip", "gaussian", "scale", "tokens", "replay", "stale",
                    "absent"]
    out.sort(key=lambda s: (s["setting"] != "default", s["setting"], s["sites"],
                            attack_order.index(s["attack"]) if s["attack"] in attack_order
                            else len(attack_order)))
    return out


def pct(x, signed=True):
    return "-" if x is None else (f"{100 * x:+.2f}%" if signed else f"{100 * x:.2f}%")


def table(summary):
    lines = ["| setting | sites | byzantine | attack | seeds | mean final val bpb "
             "| mean honest val bpb | gap per seed | mean gap ± s.e. | mean + 2 s.e. "
             "| vs absent (seeds) | dropped per run | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        bpb = "-" if s["mean_final_val_bpb"] is None else f"{s['mean_final_val_bpb']:.4f}"
        if s["diverged_seeds"]:
            bpb += f" ({len(s['diverged_seeds'])} diverged)"
        ref = "-" if s["mean_honest_val_bpb"] is None else f"{s['mean_honest_val_bpb']:.4f}"
        per_seed = ", ".join("div." if g is None else f"{100 * g:+.1f}" for g in s["gaps"])
        gap = pct(s["mean_gap"]) + ("" if s["se_gap"] is None else f" ± {100 * s['se_gap']:.2f}")
        vs_absent = "-"
        if s["mean_gap_vs_absent"] is not None:
            vs_absent = pct(s["mean_gap_vs_absent"]) + (
                "" if s["se_gap_vs_absent"] is None else f" ± {100 * s['se_gap_vs_absent']:.2f}"
            ) + f" ({s['absent_seeds']})"
        drops = "-" if s["mean_updates_dropped"] is None else f"{s['mean_updates_dropped']:g}"
        lines.append(f"| {s['setting']} | {s['sites']} | {s['byzantine']} | {s['attack']} | "
                     f"{len(s['seeds'])} | {bpb} | {ref} | {per_seed} | {gap} | "
                     f"{pct(s['mean_plus_2se'])} | {vs_absent} | {drops} | {s['verdict']} |")
    text = "\n".join(lines)
    missed = [s for s in summary if s["verdict"].startswith("MISSED") or "NOT real" in s["verdict"]]
    if missed:
        text += "\n\nTargets missed: " + "; ".join(
            f"{s['setting']} {s['sites']} sites / {s['byzantine']} {s['attack']}: "
            + ("no gap" if s["mean_gap"] is None else
               f"{pct(s['mean_gap'])} mean gap over {len(s['seeds'])} seed(s)")
            for s in missed) + " (bench/robust/README.md)."
    else:
        text += "\n\nEvery target met."
    return text


def write_results_md(doc, text):
    md_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "RESULTS.md")
    md = open(md_path).read()
    head = "## Attacks on aggregation (bench/robust)"
    default_row = next((r for r in doc["rows"] if r["setting"] == "default"), doc["rows"][0])
    loads = [r["load_average"] for r in doc["rows"] if r.get("load_average") is not None]
    load = f", load average {min(loads):.1f} to {max(loads):.1f}" if loads else ""
    body = (f"{head}\n\n`bench/robust/run.sh` ({doc['date']}, 2-core CPU{load}): `atoll simulate`, "
            f"demo model, {doc['rounds']} rounds x {doc['inner_steps']} inner steps, sites "
            f"sampling every genre (`--split iid`), codecs none / exact pulls, "
            f"{doc['eval_tokens']} validation tokens, one kernel thread per site; the last K "
            f"sites are Byzantine (`--byzantine K --attack NAME`, simulate/byzantine.h); "
            f"`absent`: the K attacker sites never join (`--nodes sites - K`, the other sites "
            f"with the same data), the best any aggregator that leaves them out can do. "
            f"`default` is the default `[robust]` section (screen = \"{default_row['screen']}\" "
            f"at {default_row['norm_multiple']:g} x the median norm, replays dropped at cosine "
            f">= 0.99 to the site's previous accepted update, stale updates dropped at "
            f"stale_margin = 0.05, aggregator \"{default_row['aggregator']}\"); "
            f"`mean-no-screening` is the plain token-weighted mean with screen = \"off\" (no "
            f"replay or stale detection either). Each seed is a paired trial: the gap is "
            f"(attacked - honest) / honest against the honest run of the same setting, site "
            f"count and seed; mean ± standard error over the seeds. Targets: `default` mean + "
            f"2 s.e. <= 2%; `mean-no-screening` a diverged seed or a mean gap >= 10%. Rows per "
            f"seed: `bench/results/robust.json`; reading and what is not covered: "
            f"bench/robust/README.md.\n\n{text}\n")
    if head in md:
        # Replaces the heading, its paragraph and the table up to the "Targets missed" / "Every
        # target met" line; the reading paragraphs written under it stay.
        start = md.index(head)
        nxt = md.find("\n## ", start + len(head))
        stop = len(md) if nxt < 0 else nxt
        ends = [i for i in (md.find("\nTargets missed: ", start),
                            md.find("\nEvery target met.", start)) if 0 <= i < stop]
        if ends:
            line_end = md.find("\n", min(ends) + 1)
            md = md[:start] + body + md[(len(md) if line_end < 0 else line_end + 1):]
        else:
            md = md[:start] + body + ("" if nxt < 0 else md[nxt:])
    else:
        md = md.rstrip("\n") + "\n\n" + body
    open(md_path, "w").write(md)


def main(argv):
    out, write_md, rounds, inner, eval_tokens, work, merge, reuse_honest = argv[:8]
    runs = [n.split(":") for n in argv[8:]]
    rows = make_rows(read_summaries(work, runs, out, reuse_honest))
    if merge == "1" and os.path.exists(out):
        rows = merge_rows(out, rows)
    for r in rows:
        r["verdict"] = row_verdict(r)
    summary = summarize(rows)
    doc = {"date": datetime.date.today().isoformat(), "machine": "2-core CPU",
           "rounds": int(rounds), "inner_steps": int(inner), "eval_tokens": int(eval_tokens),
           "model": "demo: dim 128, 4 layers, 4 heads, ffn 384, seq 128, batch 8",
           "split": "iid",
           "targets": "default: mean + 2 s.e. of the paired gaps to honest <= 2% for every "
                      "attack; mean without screening: a seed diverges or the mean gap >= 10%",
           "summary": summary, "rows": rows}
    json.dump(doc, open(out, "w"), indent=1, allow_nan=True)
    text = table(summary)
    print(text)
    if write_md == "1":
        write_results_md(doc, text)


if __name__ == "__main__":
    main(sys.argv[1:])
