#!/usr/bin/env bash
# Pretrain BERT `mini` (4 layers, hidden 256) with MLM + NSP on Jane Austen, the Wikipedia excerpt and
# BBC News, with the bert-base-uncased vocabulary, for at most 60 minutes of training on a CPU.
# Output: runs/mini-real/ (a save_pretrained folder, metrics.jsonl, metrics.png, log.txt).
# These are the settings of the run reported in the README (4,016 steps in 60 minutes on an idle
# 2-core CPU). On cores shared with other jobs, THREADS=1 measured about twice as fast per step.
set -euo pipefail
cd "$(dirname "$0")/.."
export BERTKIT_ASSETS="${BERTKIT_ASSETS:-$PWD/.assets}"
PY="${PYTHON:-.venv/bin/python}"
A="$BERTKIT_ASSETS"
OUT="${OUT:-runs/mini-real}"
mkdir -p "$OUT"
# .jsonl records are read directly (field "text", one document per article).
"$PY" -m bertkit pretrain \
  --corpus "$A/austen/austen.txt" "$A/wiki/wiki.txt" "$A/bbcnews/train.jsonl" \
  --vocab "$A/vocab/uncased.txt" --config mini --dropout 0.0 \
  --seq-len 128 --batch-size 32 --max-steps 4500 --max-minutes 60 \
  --lr 1e-3 --warmup-steps 300 --weight-decay 0.01 --precision bf16 \
  --eval-every 250 --eval-instances 512 --save-every 500 --keep-last 2 \
  --threads "${THREADS:-2}" --seed 0 --output "$OUT" "$@" 2>&1 | tee -a "$OUT/log.txt"
