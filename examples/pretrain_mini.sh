#!/usr/bin/env bash
# Pretrain BERT `mini` (4 layers, hidden 256) with MLM + NSP on Jane Austen, the Wikipedia excerpt and
# BBC News, with the bert-base-uncased vocabulary, for at most 60 minutes of training on a CPU.
# Output: runs/mini-real/ (a save_pretrained folder, metrics.jsonl, metrics.png, log.txt).
# --threads 1: the 2 cores were shared with three other jobs; with oversubscribed cores one
# intra-op thread measured about twice as fast per step as two (set THREADS=2 on an idle machine).
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
  --seq-len 128 --batch-size 32 --max-steps 950 --max-minutes 60 \
  --lr 1e-3 --warmup-steps 80 --weight-decay 0.01 --precision bf16 \
  --eval-every 50 --eval-instances 256 --save-every 100 --keep-last 2 \
  --threads "${THREADS:-1}" --seed 0 --output "$OUT" "$@" 2>&1 | tee -a "$OUT/log.txt"
