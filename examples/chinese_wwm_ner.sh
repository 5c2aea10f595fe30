#!/usr/bin/env bash
# Chinese BERT end to end: whole-word-masking pretraining of `mini` on the Chinese news asset with the
# bert-base-chinese vocabulary, then MSRA NER fine-tuned from it and, with the same config, from random
# initialisation. These are the settings of docs/chinese.md. Needs jieba (pip install
# 'bertkit[zh]').
#
# Data: news_zh.txt holds the text of the MSRA train and test sentences, one a line. Only the train
# part (the first 50,289 lines) is used for pretraining, so no test sentence is seen even as raw text,
# and a blank line every 16 sentences makes documents (held-out split, NSP pairs). The NER subsets are
# seeded: 5,000 training sentences (seed 0) and 1,000 test sentences (seed 1).
set -euo pipefail
cd "$(dirname "$0")/.."
export BERTKIT_ASSETS="${BERTKIT_ASSETS:-$PWD/.assets}"
PY="${PYTHON:-.venv/bin/python}"
A="$BERTKIT_ASSETS"
OUT="${OUT:-runs/zh}"
MINUTES="${MINUTES:-40}"
mkdir -p "$OUT/ner"

head -n 50289 "$A/msra/news_zh.txt" | awk '{print} NR%16==0 {print ""}' > "$OUT/news_zh_train.txt"
"$PY" - "$A" "$OUT" <<'EOF'
import random, sys
a, out = sys.argv[1], sys.argv[2]
def blocks(name): return open(f"{a}/msra/{name}.txt", encoding="utf-8").read().strip().split("\n\n")
for name, n, seed, dest in (("train", 5000, 0, "train5000"), ("test", 1000, 1, "test1000")):
    b = blocks(name)
    keep = sorted(random.Random(seed).sample(range(len(b)), n))
    open(f"{out}/ner/{dest}.txt", "w", encoding="utf-8").write("\n\n".join(b[i] for i in keep) + "\n")
EOF

# 1. Word boundaries (jieba) stored next to the token ids, once.
[ -f "$OUT/shards/meta.json" ] || "$PY" -m bertkit prepare-data --corpus "$OUT/news_zh_train.txt" \
  --vocab "$A/vocab/chinese.txt" --format bert --whole-word-masking --output "$OUT/shards"

# 2. Pretraining: the cpu-hour recipe's two phases scaled to $MINUTES training minutes, masking 15%
#    of the words as the reported run did (the recipe's own rate is now 30%).
"$PY" -m bertkit pretrain --recipe cpu-hour --max-minutes "$MINUTES" --data "$OUT/shards" \
  --vocab "$A/vocab/chinese.txt" --whole-word-masking --mask-rate 0.15 --config mini --eval-instances 256 \
  --threads "${THREADS:-2}" --seed 0 --log-every 10 --output "$OUT/mini-wwm" "$@"
"$PY" -m bertkit fill-mask --model "$OUT/mini-wwm" "今天天气真[MASK]啊" "中国的首都是[MASK]京"

# 3. The same config from random initialisation (dropout 0, as the recipe's model).
[ -f "$OUT/random-init/model.safetensors" ] || "$PY" examples/random_init.py "$OUT/mini-wwm" "$OUT/random-init" --seed 0

# 4. MSRA NER from both; windows of 64 tokens, so the longer sentences are split into windows.
for init in mini-wwm random-init; do
  OMP_NUM_THREADS="${THREADS:-2}" "$PY" -m bertkit finetune --task token-classification --model "$OUT/$init" \
    --train "$OUT/ner/train5000.txt" --validation "$OUT/ner/test1000.txt" --output "$OUT/ner/$init" \
    --epochs 3 --batch-size 32 --lr 3e-4 --max-length 64 --doc-stride 16 --precision bf16 --seed 0
done
"$PY" -m bertkit predict --model "$OUT/ner/mini-wwm" --input "$OUT/ner/test1000.txt" --output "$OUT/ner/predictions.jsonl"
