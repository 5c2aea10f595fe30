#!/usr/bin/env bash
# Pretrain BERT `mini` (4 layers, hidden 256) on Jane Austen, the Wikipedia excerpt and BBC News with
# the bert-base-uncased vocabulary, on a 2-core CPU. These are the settings of the run in docs/guides/pretraining.md.
#
# Phase 1 (60 training minutes): MLM on 32-token sequences. A post-LN BERT trained from scratch sits on
# the "unigram plateau" (it predicts frequent tokens whatever the context) until its attention has
# learned to find neighbouring positions. With 128-token sequences that took more than our 60 minutes
# (14.2% held-out accuracy after 4,016 steps, see docs/pretraining.md); with 32-token sequences each neighbour
# gets 4x the weight under the initial uniform attention, and the model leaves the plateau within
# minutes. BERT itself trained 90% of its steps at seq 128 before moving to 512, for the same reason
# of cost. NSP is left out of this phase: on 32 tokens its segments would be a few words each.
#
# Phase 2 (PHASE2_MINUTES, default 15; 0 skips it): continue at seq 128 with MLM + NSP, as BERT's
# second phase does, so that positions 32-127 and the NSP head are trained too.
#
# Output: $OUT (phase 1) and $OUT-seq128 (phase 2): save_pretrained folders with metrics.jsonl,
# metrics.png; the console logs go to $OUT.log and $OUT-seq128.log beside them (bertkit writes
# only into a new or empty folder, or its own earlier output). examples/plot_pretrain_phases.py draws both phases on one time axis.
set -euo pipefail
cd "$(dirname "$0")/.."
export BERTKIT_ASSETS="${BERTKIT_ASSETS:-$PWD/.assets}"
PY="${PYTHON:-.venv/bin/python}"
A="$BERTKIT_ASSETS"
OUT="${OUT:-runs/mini-real}"
CORPUS=("$A/austen/austen.txt" "$A/wiki/wiki.txt" "$A/bbcnews/train.jsonl")  # .jsonl: field "text"
mkdir -p "$(dirname "$OUT")"
"$PY" -m bertkit pretrain --corpus "${CORPUS[@]}" \
  --vocab "$A/vocab/uncased.txt" --config mini --dropout 0.0 --no-nsp \
  --seq-len 32 --batch-size 64 --max-steps 12500 --max-minutes 60 \
  --lr 1e-3 --warmup-steps 300 --weight-decay 0.01 --precision bf16 \
  --eval-every 500 --eval-instances 512 --save-every 1000 --keep-last 2 --log-every 10 \
  --threads "${THREADS:-2}" --seed 0 --output "$OUT" "$@" 2>&1 | tee -a "$OUT.log"

if [ "${PHASE2_MINUTES:-15}" != "0" ]; then
  "$PY" -m bertkit pretrain --corpus "${CORPUS[@]}" --model "$OUT" --dropout 0.0 \
    --seq-len 128 --batch-size 32 --max-steps 1300 --max-minutes "${PHASE2_MINUTES:-15}" \
    --lr 5e-4 --warmup-steps 100 --weight-decay 0.01 --precision bf16 \
    --eval-every 100 --eval-instances 512 --save-every 500 --keep-last 2 --log-every 10 \
    --threads "${THREADS:-2}" --seed 0 --output "$OUT-seq128" 2>&1 | tee -a "$OUT-seq128.log"
fi
