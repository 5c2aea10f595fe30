"""Pretraining step speed: bertkit's Trainer vs transformers' BertForPreTraining, same config.

Both sides train the `mini` config (4 layers, hidden 256, vocab 30,522) on the same real text
(Jane Austen + Wikipedia excerpt, prepared into BERT NSP instances) at seq 128, batch 32, in one
process, interleaved repeat by repeat. A step is data loading + collation + forward + backward +
clipping + AdamW step; tokens/s = batch x seq_len / wall time of the step (data loading included).

* bertkit: the real `Trainer` (tokens/s read from its metrics.jsonl) with its defaults: bf16
  autocast, sparse MLM head (only masked positions go through the transform and the decoder),
  SDPA attention, fused AdamW, set_to_none, dynamic masking in `MaskingCollator`.
* transformers: the usual loop with `DataCollatorForLanguageModeling` (NSP label added),
  `BertForPreTraining` in its default fp32 (dense MLM over all positions, its default attention),
  torch AdamW. With --ref-bf16 a second reference line runs it under bf16 autocast too.

Both sides run on ``--device`` (the CPU by default; on a GPU each reference step's clock stops after
the device has finished, and bertkit's Trainer reads its loss every step). Prints median tokens/s of
each side and the ratio of medians. Run:
    .venv/bin/python benchmarks/pretrain.py [--repeats 3] [--steps 4] [--ref-bf16] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertkit.assets import asset_path


def build_data(tmp: Path, seq_len: int):
    from bertkit.data import (
        MaskingCollator,
        PretrainingDataset,
        ShardedCorpus,
        create_nsp_instances,
        prepare_corpus,
    )
    from bertkit.tokenization import load_tokenizer, load_vocab

    vocab_file = asset_path("vocab-uncased")
    vocab = list(load_vocab(vocab_file))
    text = tmp / "text.txt"
    text.write_text(
        "\n".join(asset_path("austen").read_text(encoding="utf-8").splitlines()[:3000])
        + "\n\n"
        + asset_path("wiki").read_text(encoding="utf-8")[:600_000],
        encoding="utf-8",
    )
    corpus = ShardedCorpus(prepare_corpus([text], load_tokenizer(vocab_file), tmp / "data", vocab, progress=False))
    inst = create_nsp_instances(corpus, np.arange(corpus.num_documents), seq_len, seed=0)
    ds = PretrainingDataset(corpus, inst, vocab.index("[CLS]"), vocab.index("[SEP]"), seed=0)
    return vocab, ds, MaskingCollator(vocab, seed=0)


def bertkit_run(model, ds, collate, out: Path, steps: int, batch: int, seed: int, device: str) -> list[float]:
    from bertkit.training import Trainer, TrainingArguments
    from bertkit.training.pretraining import mlm_nsp_loss

    cfg = TrainingArguments(
        output=str(out),
        max_steps=steps,
        batch_size=batch,
        lr=1e-4,
        warmup_steps=0,
        seed=seed,
        progress=False,
        plot=False,
        save_final=False,
        log_every=1,
        device=device,
    )
    Trainer(model, cfg, ds, collate_fn=collate, loss_fn=mlm_nsp_loss).train()
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["tokens_per_sec"] for r in rows if "loss" in r]


def reference_run(
    model, opt, ds, hf_collate, steps: int, batch: int, seq_len: int, seed: int, bf16: bool, device: str
) -> list[float]:
    rng = np.random.default_rng(seed)
    rates = []
    kind = torch.device(device).type
    ctx = (lambda: torch.autocast(kind, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    model.train()
    for _ in range(steps):
        t0 = time.perf_counter()
        idx = rng.choice(len(ds), batch, replace=False)
        items = [ds[int(i)] for i in idx]
        feats = [
            {"input_ids": it["input_ids"].tolist(), "token_type_ids": it["token_type_ids"].tolist()} for it in items
        ]
        b = hf_collate(feats)
        b["next_sentence_label"] = torch.tensor([it["next_sentence_label"] for it in items])
        b = {k: v.to(device) for k, v in b.items()}
        with ctx():
            out = model(**b)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if kind == "cuda":
            torch.cuda.synchronize()
        rates.append(b["input_ids"].numel() / (time.perf_counter() - t0))
    return rates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per repeat and side (after 1 warm-up)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--config", default="mini")
    ap.add_argument("--ref-bf16", action="store_true", help="also time the reference under bf16 autocast")
    ap.add_argument("--threads", type=int, default=0, help="torch threads for both sides (0: torch's default)")
    ap.add_argument("--device", default="cpu", help="where both sides train: cpu, cuda, cuda:N")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import transformers

    from bertkit.modeling import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="bench-pretrain-"))
    vocab, ds, collate = build_data(tmp, args.seq_len)
    cfg = BertConfig.from_preset(args.config, vocab_size=len(vocab))
    ours = BertForPreTraining(cfg)
    ref_cfg = transformers.BertConfig(
        **{k: v for k, v in cfg.to_dict().items() if k not in ("architectures", "model_type", "transformers_version")}
    )
    ref = transformers.BertForPreTraining(ref_cfg)
    ref.load_state_dict(ours.state_dict(), strict=False)
    ref.to(args.device)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-4, weight_decay=0.01)
    hf_tok = transformers.BertTokenizerFast(str(asset_path("vocab-uncased")))

    # Pads to the longest sequence of the batch (multiple of 8), as bertkit's collator does.
    hf_collate = transformers.DataCollatorForLanguageModeling(
        hf_tok, mlm_probability=0.15, pad_to_multiple_of=8, return_tensors="pt"
    )

    attn = getattr(ref.config, "_attn_implementation", "?")
    cuda = args.device.startswith("cuda")
    where = torch.cuda.get_device_name(torch.device(args.device)) if cuda else f"{torch.get_num_threads()} threads"
    print(
        f"config {args.config}: {sum(p.numel() for p in ours.parameters()):,} parameters, seq {args.seq_len}, "
        f"batch {args.batch_size}, {where}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}",
        flush=True,
    )
    print(
        "bertkit: Trainer, bf16 autocast, sparse MLM head, SDPA, fused AdamW; "
        f"transformers: fp32, dense MLM head, attn_implementation={attn}, torch AdamW",
        flush=True,
    )

    results: dict[str, list[float]] = {"bertkit": [], "transformers fp32": []}
    if args.ref_bf16:
        results["transformers bf16"] = []
    for r in range(args.repeats):
        rates = bertkit_run(ours, ds, collate, tmp / f"run{r}", args.steps + 1, args.batch_size, r, args.device)
        results["bertkit"].append(statistics.median(rates[1:]))
        rates = reference_run(
            ref, ref_opt, ds, hf_collate, args.steps + 1, args.batch_size, args.seq_len, r, False, args.device
        )
        results["transformers fp32"].append(statistics.median(rates[1:]))
        if args.ref_bf16:
            rates = reference_run(
                ref, ref_opt, ds, hf_collate, args.steps + 1, args.batch_size, args.seq_len, r, True, args.device
            )
            results["transformers bf16"].append(statistics.median(rates[1:]))
        print(
            f"repeat {r + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:,.0f} tok/s" for k, v in results.items()),
            flush=True,
        )
    med = {k: statistics.median(v) for k, v in results.items()}
    for k, v in med.items():
        print(f"{k:>18}: {v:10,.0f} tokens/s (median of {args.repeats} repeats x {args.steps} steps)")
    print(f"speed-up bertkit / transformers fp32 (its default): {med['bertkit'] / med['transformers fp32']:.2f}x")
    if args.ref_bf16:
        print(f"speed-up bertkit / transformers bf16 autocast:      {med['bertkit'] / med['transformers bf16']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
