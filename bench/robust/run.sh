#!/usr/bin/env bash
# Attacks on aggregation: validation bpb of `atoll simulate` runs of the demo model (dim 128,
# 4 layers, 0.8M parameters) in which the last K sites are Byzantine (simulate/byzantine.h): each
# trains honestly, then sends sign-flip (-10 x its update), gaussian (noise of 10 x its norm),
# scale (10^6 x its update), tokens (a claim of 2^63 - 1 tokens) or replay (its previous
# round's update). Two settings: the default [robust] section, and the plain token-weighted
# mean without screening (screen = off), which shows that the attacks are real. Every run has
# the same seed, data and step budget; the honest run of each setting and site count has K = 0.
# Sites sample every Brown genre (--split iid): with the demo's genre split, the attacker's
# genres are missing from every attacked run whatever the coordinator does (README.md).
#
#   bench/robust/run.sh [--quick] [--out FILE] [--no-results-md]
#
# Default: 4 sites with 1 Byzantine and 8 sites with 2, 6 rounds x 10 inner steps, every attack
# in both settings (24 runs, about 30 minutes on 2 idle cores: 45 s a 4-site run, 90 s an 8-site). --quick: 4 sites with 1 Byzantine,
# 3 rounds x 5 steps, the default setting only, sign-flip and scale (3 runs, about a minute).
# Writes bench/results/robust.json (or --out) and, unless --no-results-md, the table into
# bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,16 "$@"

if [[ $QUICK == 1 ]]; then
  GRID="4:1"; ROUNDS=3; INNER=5; ATTACKS="sign-flip scale"; SETTINGS="default"
else
  GRID="4:1 8:2"; ROUNDS=6; INNER=10; ATTACKS="sign-flip gaussian scale tokens replay stale"
  SETTINGS="default mean-no-screening"
fi
# ROBUST_ATTACKS="replay stale": only these attacks (and the honest runs) are run again; their
# rows replace the ones of the same setting, sites and attack in the existing JSON, whose other
# rows are kept (the table is written from all of them).
MERGE=0
# ROBUST_SETTINGS="default" likewise runs only these settings.
if [[ -n ${ROBUST_ATTACKS:-} ]]; then ATTACKS=$ROBUST_ATTACKS; MERGE=1; fi
if [[ -n ${ROBUST_SETTINGS:-} ]]; then SETTINGS=$ROBUST_SETTINGS; MERGE=1; fi
# ROBUST_REUSE_HONEST=1 (with a merge): the honest runs are not run again; each attacked row is
# compared with the honest row of its setting and site count in the existing JSON (an honest
# run gives the same θ for the same config and seed).
REUSE_HONEST=$(( MERGE == 1 && ${ROBUST_REUSE_HONEST:-0} == 1 ? 1 : 0 ))
EVAL_TOKENS=8192
if [[ -z $OUT ]]; then
  if [[ $QUICK == 1 ]]; then OUT=bench/results/robust-quick.json; else OUT=bench/results/robust.json; fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

setting_flags() {  # setting -> the [robust] flags of `atoll simulate`
  case "$1" in
    default) ;;  # the [robust] defaults (docs/configuration.md)
    mean-no-screening) echo "--screen off --aggregator mean" ;;
  esac
}

names=()
run() {  # setting, sites, byzantine, attack
  local setting=$1 sites=$2 byz=$3 attack=$4
  local name="$setting-$sites-$byz-$attack"
  local attack_flags=()
  [[ $byz -gt 0 ]] && attack_flags=(--byzantine "$byz" --attack "$attack")
  echo "robust: $name ..." >&2
  # shellcheck disable=SC2046
  # Codecs pinned to none / exact pulls: the benchmark measures the aggregation, and its rows
  # were measured so (the demo's compressing defaults came later).
  "$ATOLL" simulate --nodes "$sites" --rounds "$ROUNDS" --inner-steps "$INNER" --http off --split iid \
    --codec none --pull-codec exact \
    --eval-tokens "$EVAL_TOKENS" --brown-dir "$BROWN_DIR" --store "$work/run-$name" \
    --summary-json "$work/summary-$name.json" $(setting_flags "$setting") "${attack_flags[@]}" \
    > "$work/log-$name.txt" 2>&1 || {
    # A run that ends in an error (e.g. a site's inner loss no longer finite) counts as
    # diverged; its last line says why.
    tail -n 3 "$work/log-$name.txt" >&2
    python3 - "$work/summary-$name.json" "$setting" "$(tail -n 1 "$work/log-$name.txt")" <<'PY'
import json, sys
path, setting, why = sys.argv[1:4]
plain = setting == "mean-no-screening"
json.dump({"final_val_bpb": None, "aggregator": "mean", "screen": "off" if plain else "drop",
           "norm_multiple": 5, "updates_clipped": None, "updates_dropped": None,
           "max_norm_ratio": None, "final_fingerprint": "", "wall_s": None, "failed": why},
          open(path, "w"))
PY
  }
  rm -rf "$work/run-$name"
  names+=("$setting:$sites:$byz:$attack")
}

for setting in $SETTINGS; do
  for g in $GRID; do
    sites=${g%%:*}; byz=${g##*:}
    [[ $REUSE_HONEST == 1 ]] || run "$setting" "$sites" 0 none
    for attack in $ATTACKS; do run "$setting" "$sites" "$byz" "$attack"; done
  done
done

python3 - "$OUT" "$WRITE_MD" "$ROUNDS" "$INNER" "$EVAL_TOKENS" "$work" "$MERGE" "$REUSE_HONEST" "${names[@]}" <<'PY'
import datetime, json, math, os, sys
out, write_md, rounds, inner, eval_tokens, work, merge, reuse_honest = sys.argv[1:9]
runs = [n.split(":") for n in sys.argv[9:]]
summaries = {}
for setting, sites, byz, attack in runs:
    summaries[(setting, sites, byz, attack)] = json.load(
        open(os.path.join(work, f"summary-{setting}-{sites}-{byz}-{attack}.json")))
if reuse_honest == "1":
    for r in json.load(open(out))["rows"]:
        k = (r["setting"], str(r["sites"]), "0", "none")
        if r["byzantine"] == 0 and k not in summaries:
            summaries[k] = {"final_val_bpb": r["final_val_bpb"], "reused": True}

def finite(x):
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)

rows = []
for (setting, sites, byz, attack), s in summaries.items():
    if s.get("reused"):
        continue  # the existing honest row stays as it is
    honest = summaries[(setting, sites, "0", "none")]
    final, ref = s.get("final_val_bpb"), honest.get("final_val_bpb")
    rel = (final - ref) / ref if finite(final) and finite(ref) else None
    rows.append({"aggregator": s["aggregator"], "screen": s["screen"],
                 "norm_multiple": s["norm_multiple"], "setting": setting, "attack": attack,
                 "byzantine": int(byz), "sites": int(sites), "final_val_bpb": final,
                 "honest_val_bpb": ref, "relative_to_honest": rel,
                 "initial_val_bpb": s.get("initial_val_bpb"),
                 "updates_clipped": s.get("updates_clipped"),
                 "updates_dropped": s.get("updates_dropped"),
                 "updates_replayed": s.get("updates_replayed"),
                 "updates_stale": s.get("updates_stale"),
                 "max_norm_ratio": s.get("max_norm_ratio"),
                 "final_fingerprint": s["final_fingerprint"], "wall_s": s["wall_s"],
                 "failed": s.get("failed")})

def verdict(r):
    if r["byzantine"] == 0:
        return "honest"
    rel = r["relative_to_honest"]
    if r["setting"] == "default":
        return "ok" if rel is not None and abs(rel) <= 0.02 else "MISSED (> 2%)"
    return "attack real" if rel is None or rel >= 0.10 else "attack NOT real (< 10%)"

if merge == "1" and os.path.exists(out):
    def key(r):
        return (r["setting"], r["sites"], r["byzantine"], r["attack"])
    fresh = {key(r) for r in rows}
    previous = json.load(open(out))["rows"]
    for r in previous:
        # An honest run gives the same θ again (same config and seed): say so if it did not.
        same = [n for n in rows if key(n) == key(r)]
        if r["byzantine"] == 0 and same and same[0]["final_fingerprint"] != r["final_fingerprint"]:
            print(f"robust: honest run {key(r)} changed: {r['final_fingerprint']} -> "
                  f"{same[0]['final_fingerprint']}", file=sys.stderr)
    order = [key(r) for r in previous] + [key(r) for r in rows if key(r) not in
                                           {key(p) for p in previous}]
    by_key = {key(r): r for r in previous if key(r) not in fresh}
    by_key.update({key(r): r for r in rows})
    rows = [by_key[k] for k in order]
    # Honest references of kept rows are unchanged when the honest runs are.
for r in rows:
    r["verdict"] = verdict(r)
doc = {"date": datetime.date.today().isoformat(), "machine": "2-core CPU",
       "rounds": int(rounds), "inner_steps": int(inner), "eval_tokens": int(eval_tokens),
       "model": "demo: dim 128, 4 layers, 4 heads, ffn 384, seq 128, batch 8, seed 1234",
       "split": "iid",
       "targets": "default within 2% of honest for every attack; mean without screening "
                  "diverges or >= 10% worse",
       "rows": rows}
json.dump(doc, open(out, "w"), indent=1, allow_nan=True)

def bpb(x):
    return f"{x:.4f}" if finite(x) else "diverged"

lines = ["| setting | sites | byzantine | attack | final val bpb | honest val bpb | vs honest "
         "| clipped / dropped | max norm / median | verdict |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    rel = "-" if r["relative_to_honest"] is None else f"{100 * r['relative_to_honest']:+.1f}%"
    lines.append(f"| {r['setting']} | {r['sites']} | {r['byzantine']} | {r['attack']} | "
                 f"{bpb(r['final_val_bpb'])} | {bpb(r['honest_val_bpb'])} | {rel} | "
                 f"{'-' if r['updates_clipped'] is None else r['updates_clipped']} / "
                 f"{'-' if r['updates_dropped'] is None else r['updates_dropped']} | "
                 f"{'-' if r['max_norm_ratio'] is None else format(r['max_norm_ratio'], '.3g')} | "
                 f"{r['verdict']} |")
table = "\n".join(lines)
missed = [r for r in rows if r["verdict"].startswith("MISSED") or "NOT real" in r["verdict"]]
if missed:
    table += "\n\nTargets missed: " + "; ".join(
        f"{r['setting']} {r['sites']} sites / {r['byzantine']} {r['attack']}: "
        + ("not finite" if r["relative_to_honest"] is None
           else f"{100 * r['relative_to_honest']:+.1f}% vs honest") for r in missed) + \
        " (bench/robust/README.md, \"Not covered\")."
else:
    table += "\n\nEvery target met."
print(table)
if write_md == "1":
    md_path = "bench/RESULTS.md"
    md = open(md_path).read()
    head = "## Attacks on aggregation (bench/robust)"
    default_row = next(r for r in rows if r["setting"] == "default")
    body = (f"{head}\n\n`bench/robust/run.sh` ({doc['date']}, 2-core CPU): `atoll simulate`, "
            f"demo model, {rounds} rounds x {inner} inner steps, seed 1234, sites sampling every "
            f"genre (`--split iid`), codecs none / exact pulls, {eval_tokens} "
            f"validation tokens; the last K sites are Byzantine (`--byzantine K --attack NAME`, "
            f"simulate/byzantine.h). `default` is the default `[robust]` section (screen = "
            f"\"{default_row['screen']}\" at {default_row['norm_multiple']:g} x the median norm, "
            f"replays dropped at cosine >= 0.99 to the site's previous accepted update, "
            f"stale updates dropped at stale_margin = 0.05 (cosine to the previous round's "
            f"other updates minus cosine to this round's), "
            f"aggregator \"{default_row['aggregator']}\"); `mean-no-screening` is the plain "
            f"token-weighted mean with screen = \"off\" (no replay or stale detection either). \"vs honest\" compares with the run of "
            f"the same setting and site count without Byzantine sites. Results: "
            f"`bench/results/robust.json`; reading and what is not covered: "
            f"bench/robust/README.md.\n\n{table}\n")
    if head in md:
        # Replaces the heading, its paragraph and the table up to the "Targets missed" / "Every
        # target met" line; the reading paragraphs written under it (and any marker of the
        # next section) stay.
        start = md.index(head)
        nxt = md.find("\n## ", start + len(head))
        stop = len(md) if nxt < 0 else nxt
        ends = [i for i in (md.find("\nTargets missed: ", start), md.find("\nEvery target met.", start))
                if 0 <= i < stop]
        if ends:
            line_end = md.find("\n", min(ends) + 1)
            md = md[:start] + body + md[(len(md) if line_end < 0 else line_end + 1):]
        else:
            md = md[:start] + body + ("" if nxt < 0 else md[nxt:])
    else:
        md = md.rstrip("\n") + "\n\n" + body
    open(md_path, "w").write(md)
PY
