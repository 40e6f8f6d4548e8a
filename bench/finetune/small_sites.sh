#!/usr/bin/env bash
# Federated LoRA on small-data sites (issue 17, item 8's targets read where federation pays):
# four fiction sites (Brown genres k / l / n / p: general fiction, mystery, adventure, romance),
# each holding four training documents and one validation document of its genre drawn by the
# seed, fine-tune a base trained on the other eleven genres. Methods: federated LoRA (rank 4 on
# every projection, q, k, v, o, gate, up, down), each site's adapters alone, plain DiLoCo on every
# parameter of the transformer blocks, and each site's full model alone; 32 rounds of 20 inner
# steps, each site keeping its best θ on its own validation document. Paired seeds 1-5 (quick:
# 1-3); the statistics and the table are bench/hydra/pays.sh's (its `lora_vs_full` holds the
# paired mean-bpb difference and the bytes ratio). Why this setting and these lrs:
# docs/decisions.md ("Federated LoRA on small-data fiction sites").
#
# Usage: bench/finetune/small_sites.sh [--quick] [--out FILE] [--no-results-md] [--from LOG]
#   JOBS (default 2) seeds run at a time, one kernel thread each; --from LOG tabulates the JSON
#   lines of an earlier run instead of running.
set -euo pipefail
cd "$(dirname "$0")/../.."
quick=0
for a in "$@"; do
  [[ $a == --quick ]] && quick=1
  if [[ $a == -h || $a == --help ]]; then sed -n 2,15p "$0"; exit 0; fi
done
if [[ $quick == 1 ]]; then key=finetune-small-sites-quick; else key=finetune-small-sites; fi
FLAGS=(--dim 128 --layers 2 --heads 4 --ffn 384
       --sites k:1.0,l:1.0,n:1.0,p:1.0 --base-genres abcdefghjmr --base-steps 3000 --train-docs 4
       --lr 1e-3 --lora-lr 1e-2 --lora-rank 4 --lora-targets q,k,v,o,gate,up,down
       --methods base,local_lora,lora,local_full,full)
exec env RESULTS_SECTION="$key" RESULTS_BY=bench/finetune/small_sites.sh RESULTS_TITLE="Federated LoRA on small-data fiction sites (issue 17)" \
  JOBS="${JOBS:-2}" bench/hydra/pays.sh --out "bench/results/$key.json" "$@" -- "${FLAGS[@]}"
