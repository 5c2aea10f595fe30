"""Does ELECTRA's discriminator learn? A few hundred steps of a mini pair, outside the recipe.

    python benchmarks/electra_probe.py [--temperature 1] [--uniform-mix 0] [--steps 600] [--threads 2]
    python benchmarks/electra_probe.py --replace unigram|uniform [--reference]

The default mode trains bertkit's generator and discriminator (``ElectraPretrainingModel``: a mini
discriminator, 4 x 256, and a 1/4-size generator sharing its embeddings) on 30-token windows of
Austen, batch 64, AdamW at peak ``--lr`` after 50 warmup steps, bf16 autocast, mask rate 0.15. Every
50 steps it prints the generator's accuracy and the discriminator's AUC (replaced against original
tokens) on that step's batch. ``--temperature`` samples the replacements from
``softmax(logits / T)``; ``--uniform-mix P`` replaces a fraction P of the samples by uniform random
tokens.

``--replace`` trains the discriminator alone on 15% of tokens replaced by draws from the text's
unigram distribution or uniformly from the vocabulary; ``--reference`` runs transformers'
``ElectraForPreTraining`` of the same shape in the same loop, so a stall that both show is the
objective's and not bertkit's. What it gave is row 16 of ``docs/pretraining.md``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from bertkit.assets import asset_path


def windows(length: int = 30, max_lines: int = 20000) -> tuple[torch.Tensor, list[int], object]:
    """(S, length + 2) [CLS] window [SEP] rows of Austen's text, its token ids, and the tokenizer."""
    from bertkit import BertTokenizer

    tok = BertTokenizer(str(asset_path("vocab-uncased")))
    lines = [s.strip() for s in asset_path("austen").read_text(encoding="utf-8").splitlines() if len(s.strip()) > 40]
    ids: list[int] = []
    for line in lines[:max_lines]:  # a whole paragraph's ids, cut into windows below, not one model input
        ids.extend(tok.convert_tokens_to_ids(tok.tokenize(line)))
    rows = [[tok.cls_token_id, *ids[i : i + length], tok.sep_token_id] for i in range(0, len(ids) - length, length)]
    return torch.tensor(rows), ids, tok


def electra_config(vocab_size: int) -> dict[str, int]:
    """The mini discriminator's shape (the recipe's ``--config mini``)."""
    return dict(
        vocab_size=vocab_size,
        hidden_size=256,
        embedding_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
        max_position_embeddings=512,
    )


def warmup_lr(opt: torch.optim.Optimizer, peak: float, step: int, warmup: int = 50) -> None:
    for group in opt.param_groups:
        group["lr"] = peak * min(1.0, step / warmup)


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    from bertkit.tasks.metrics import roc_auc

    return float(roc_auc(scores.float().detach().flatten().numpy(), labels.flatten().numpy()))


def run_pair(args: argparse.Namespace) -> None:
    import bertkit.data.replaced_tokens as rt
    from bertkit import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining
    from bertkit.data.replaced_tokens import electra_collator
    from bertkit.training.objectives import ElectraPretrainingModel, generator_config

    seqs, _, tok = windows()
    vocab = list(tok.vocab)
    cfg = ElectraConfig(**electra_config(len(vocab)))
    model = ElectraPretrainingModel(
        ElectraForPreTraining(cfg), ElectraForMaskedLM(generator_config(cfg, 0.25)), temperature=args.temperature
    )
    if args.uniform_mix > 0:  # a fraction of the generator's samples become uniform random tokens
        sample = rt.sample_from_logits

        def mixed(logits: torch.Tensor, generator=None, temperature: float = 1.0) -> torch.Tensor:
            out = sample(logits, generator, temperature)
            swap = torch.rand(len(out)) < args.uniform_mix
            out[swap] = torch.randint(1000, logits.shape[1], (int(swap.sum()),))
            return out

        rt.sample_from_logits = mixed
    collate = electra_collator(vocab, mask_prob=0.15)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        warmup_lr(opt, args.lr, step)
        batch = collate([{"input_ids": seqs[j].tolist()} for j in rng.integers(0, len(seqs), 64)])
        with torch.autocast("cpu", torch.bfloat16):
            out = model(**batch)
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            real = batch["attention_mask"] == 1
            masked = batch["labels"][batch["labels"] != -100]
            acc = float((out.mlm_logits.argmax(-1) == masked).float().mean())
            disc_auc = auc(out.disc_logits[real], out.disc_labels[real])
            print(
                f"step {step:4d} {time.perf_counter() - t0:5.0f}s  generator accuracy {acc:.3f}  "
                f"discriminator loss {out.disc_loss.item():.4f}  AUC {disc_auc:.3f}",
                flush=True,
            )


def run_discriminator(args: argparse.Namespace) -> None:
    from bertkit import ElectraConfig, ElectraForPreTraining

    seqs, ids, tok = windows()
    vocab_size = len(tok.vocab)
    if args.reference:
        import transformers

        fields = {k: v for k, v in electra_config(vocab_size).items() if k != "max_position_embeddings"}
        disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(**fields))
    else:
        disc = ElectraForPreTraining(ElectraConfig(**electra_config(vocab_size)))
    counts = torch.bincount(torch.tensor(ids), minlength=vocab_size).float()
    opt = torch.optim.AdamW(disc.parameters(), lr=args.lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        warmup_lr(opt, args.lr, step)
        x = seqs[torch.randint(0, len(seqs), (64,), generator=g)].clone()
        chosen = torch.rand(x.shape, generator=g) < 0.15
        chosen[:, 0] = chosen[:, -1] = False
        n = int(chosen.sum())
        if args.replace == "uniform":
            x[chosen] = torch.randint(1000, vocab_size, (n,), generator=g)
        else:
            x[chosen] = torch.multinomial(counts, n, replacement=True, generator=g)
        labels = chosen.long()  # a draw equal to the original still counts as replaced: rare enough here
        with torch.autocast("cpu", torch.bfloat16):
            out = disc(input_ids=x, attention_mask=torch.ones_like(x), labels=labels)
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(disc.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            who = "transformers" if args.reference else "bertkit"
            print(
                f"{who} {args.replace} step {step:4d} {time.perf_counter() - t0:5.0f}s  "
                f"loss {out.loss.item():.4f}  AUC {auc(out.logits, labels):.3f}",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--temperature", type=float, default=1.0, help="the generator's sampling temperature")
    ap.add_argument("--uniform-mix", type=float, default=0.0, help="fraction of samples made uniform random")
    ap.add_argument("--replace", choices=["unigram", "uniform"], default=None, help="train the discriminator alone")
    ap.add_argument("--reference", action="store_true", help="with --replace: transformers' discriminator")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    run_discriminator(args) if args.replace else run_pair(args)


if __name__ == "__main__":
    main()
