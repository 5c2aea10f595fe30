"""Fill-mask top-5 and the held-out MLM accuracy curve of a model from `bertkit pretrain`.

.venv/bin/python examples/pretrain_fill_mask.py runs/mini-real
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from bertkit.modeling import BertForMaskedLM
from bertkit.tokenization import BertTokenizer

SENTENCES = [
    "the [MASK] of the house",
    "she went to the [MASK] to buy some bread.",
    "the prime [MASK] said the government would act.",
    "it is a truth universally [MASK], that a single man in possession of a good fortune must be in want of a wife.",
    "he [MASK] his hand to her.",
    "the company reported a rise in [MASK] profits.",
]


def main(folder: str) -> int:
    out = Path(folder)
    tok = BertTokenizer.from_pretrained(str(out))
    model = BertForMaskedLM.from_pretrained(str(out)).eval()
    for text in SENTENCES:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc).logits[0]
        pos = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0]
        probs = logits[pos].float().softmax(-1)
        top = probs.topk(5)
        guesses = ", ".join(f"{tok.convert_ids_to_tokens(int(i))} ({p:.3f})" for p, i in zip(top.values, top.indices))
        print(f"{text}\n    -> {guesses}")
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]
    print("\nheld-out MLM accuracy (step, training minutes, accuracy, NSP accuracy, perplexity):")
    for r in rows:
        if "eval_mlm_accuracy" in r:
            print(
                f"  {r['step']:5d}  {r.get('train_seconds', 0) / 60:6.1f} min  {r['eval_mlm_accuracy']:.4f}"
                f"  {r.get('eval_nsp_accuracy', float('nan')):.3f}  {r['eval_perplexity']:10.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "runs/mini-real"))
