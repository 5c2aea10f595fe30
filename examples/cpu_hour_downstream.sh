#!/usr/bin/env bash
# The CPU-hour recipe judged downstream: pretrain `mini` for 60 training minutes with
# `bertkit pretrain --recipe cpu-hour` (Austen + Wikipedia + BBC News, the bert-base-uncased
# vocabulary), then fine-tune it on polarity and on BBC News next to the same config from random
# initialisation. MiniLM's rows come from `benchmarks/finetune_results.py` with no --model.
# These are the settings of the table in docs/guides/pretraining.md.
#
# A killed pretraining continues with: examples/cpu_hour_downstream.sh --resume
set -euo pipefail
cd "$(dirname "$0")/.."
export BERTKIT_ASSETS="${BERTKIT_ASSETS:-$PWD/.assets}"
PY="${PYTHON:-.venv/bin/python}"
A="$BERTKIT_ASSETS"
OUT="${OUT:-runs/cpu-hour}"
mkdir -p "$(dirname "$OUT")"

[ -f "$OUT/model.safetensors" ] || "$PY" -m bertkit pretrain --recipe cpu-hour --max-minutes "${MINUTES:-60}" \
  --corpus "$A/austen/austen.txt" "$A/wiki/wiki.txt" "$A/bbcnews/train.jsonl" --vocab "$A/vocab/uncased.txt" \
  --config mini --threads "${THREADS:-2}" --seed 0 --log-every 10 --output "$OUT" "$@"
"$PY" -m bertkit fill-mask --model "$OUT" "the capital of france is [MASK]." "she [MASK] to the ball with mr darcy."

[ -f "$OUT-random-init/model.safetensors" ] || "$PY" examples/random_init.py "$OUT" "$OUT-random-init" --seed 0
# Every layer trained for both (MiniLM's BBC row freezes its lowest two layers, for time).
for model in "$OUT" "$OUT-random-init"; do
  "$PY" benchmarks/finetune_results.py --model "$model" --only polarity,bbcnews --no-freeze \
    --threads "${THREADS:-2}" --no-progress --out "$model-downstream"
done
