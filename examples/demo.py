"""`make demo`: bertkit's main story, end to end on a CPU in about ten minutes.

1. train a small WordPiece vocabulary on a real corpus (Jane Austen's novels) and show how a few
   tricky words split;
2. pretrain a tiny BERT on the same corpus for a few minutes and ask it to fill in [MASK]s;
3. fine-tune the real MiniLM checkpoint on Pang & Lee sentence polarity and report accuracy on the
   held-out 20%;
4. classify a few new sentences with the fine-tuned model, with label names;
5. look inside the fine-tuned model: `bertkit explain` writes one offline HTML report (tokens,
   embeddings, every attention head, hidden states, [CLS] and pooler, label scores) and checks
   the model against a from-scratch rebuild of its equations.

Everything is written under runs/demo/. Each step says what it does; if a step fails, it says why
and the demo goes on with the next one, then exits non-zero.

    python examples/demo.py [--pretrain-minutes 4] [--quick]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
RUN = ROOT / "runs" / "demo"
TRICKY = ["unheard", "124443286539", "melodically", "best-selling", "unaffectedly", "Pemberley"]


def banner(n: int, title: str, what: str) -> None:
    print(f"\n{'=' * 78}\nStep {n}: {title}\n{'-' * 78}\n{what}\n", flush=True)


def step_vocab(args) -> Path | None:
    from bertkit.assets import asset_path
    from bertkit.tokenization import BertTokenizer, WordPieceTrainer

    corpus = asset_path("austen")
    banner(
        1,
        "a WordPiece vocabulary from raw text",
        f"Counting the words of {corpus.name} ({corpus.stat().st_size / 1e6:.1f} MB, Jane Austen's six\n"
        f"novels), then merging the most frequent adjacent pieces until the vocabulary holds\n"
        f"{args.vocab_size:,} entries. Word-internal pieces start with '##'.",
    )
    out = RUN / "vocab"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    trainer = WordPieceTrainer(vocab_size=args.vocab_size, min_frequency=2, show_progress=True)
    trainer.train([str(corpus)])
    trainer.save(str(out / "vocab.txt"))
    print(f"  learned {args.vocab_size:,} entries in {time.perf_counter() - t0:.0f}s -> {out / 'vocab.txt'}")
    ours = BertTokenizer(vocab_file=str(out / "vocab.txt"))
    try:
        bert = BertTokenizer(vocab_file=str(asset_path("vocab-uncased")))
    except FileNotFoundError:
        bert = None
    print(
        f"\n  {'word':<15s} {'our Austen vocabulary (' + str(len(ours)) + ')':<40s} "
        f"{'bert-base-uncased (30,522)' if bert else ''}"
    )
    for w in TRICKY:
        a = " ".join(ours.tokenize(w))
        b = " ".join(bert.tokenize(w)) if bert else ""
        print(f"  {w:<15s} {a:<40s} {b}")
    print(
        "\n  Rare words fall apart into frequent pieces; numbers split into digit chunks; the\n"
        "  hyphen is punctuation, so 'best-selling' is three words before WordPiece even starts."
    )
    return out / "vocab.txt"


def step_pretrain(args, vocab: Path | None) -> Path | None:
    from bertkit.assets import asset_path

    banner(
        2,
        "pretrain a tiny BERT (masked language modelling)",
        f"A 'tiny' BERT (2 layers, hidden 128) learns to predict masked words of the Austen corpus\n"
        f"for about {args.pretrain_minutes:g} minutes, through `bertkit pretrain` (the shared Trainer).",
    )
    out = RUN / "pretrain"
    vocab = vocab or asset_path("vocab-uncased")
    # 32-token sequences: a from-scratch BERT leaves the "predict frequent words" plateau within
    # minutes at seq 32, and not within an hour at seq 128 (docs/pretraining.md).
    cmd = [
        sys.executable,
        "-m",
        "bertkit",
        "pretrain",
        "--corpus",
        str(asset_path("austen")),
        "--vocab",
        str(vocab),
        "--config",
        "tiny",
        "--no-nsp",
        "--seq-len",
        "32",
        "--batch-size",
        "64",
        "--lr",
        "2e-3",
        "--warmup-ratio",
        "0.05",
        "--max-steps",
        str(args.pretrain_steps),
        "--max-minutes",
        str(args.pretrain_minutes),
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--cache-dir",
        str(RUN / "pretrain-data"),
        "--output",
        str(out),
        "--overwrite",
    ]  # the demo's own folder: a second demo replaces the first one's run
    print("  $ " + " ".join(Path(c).name if c == sys.executable else c for c in cmd), flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    rc = subprocess.call(cmd, env=env)
    if rc != 0:
        raise RuntimeError(f"`bertkit pretrain` exited with status {rc}")
    from bertkit.pipelines import pipeline

    fill = pipeline("fill-mask", model=out)
    print("\n  What the tiny model guesses for [MASK] (top 5):")
    for text in [
        "it is a truth universally acknowledged , that a single man in possession of a good "
        "fortune , must be in want of a [MASK] .",
        "she was the [MASK] of the family .",
        "mr . darcy [MASK] into the room .",
    ]:
        guesses = ", ".join(f"{r['token_str']} ({r['score']:.2f})" for r in fill(text, top_k=5))
        print(f"  {text}\n    -> {guesses}")
    print(
        "\n  A few minutes on a CPU teach a tiny model the most frequent words and some grammar;\n"
        "  BERT itself trained for days on TPUs. Step 3 starts from such a real checkpoint."
    )
    return out


def step_finetune(args) -> Path | None:
    from bertkit.assets import asset_path
    from bertkit.tasks import finetune

    banner(
        3,
        "fine-tune the real MiniLM checkpoint on sentence polarity",
        "all-MiniLM-L6-v2 (6 layers, 22.7M parameters) gets a fresh classification head and is\n"
        "fine-tuned on 3,200 movie-review sentences (Pang & Lee), then scored on the held-out 800.\n"
        "Batches group sentences of similar length, so almost no compute goes to padding.",
    )
    out = RUN / "polarity"
    res = finetune(
        "text-classification",
        asset_path("minilm"),
        asset_path("polarity-train"),
        out,
        asset_path("polarity-test"),
        epochs=args.epochs,
        max_length=64,
        batch_size=32,
        lr=1e-4,
        max_train_samples=800 if args.quick else None,
        overwrite=True,
    )
    print(
        f"\n  accuracy on 800 held-out sentences: {res.metrics['accuracy']:.1%} "
        f"(macro F1 {res.metrics['macro_f1']:.3f}, MCC {res.metrics['mcc']:.3f}), "
        f"{res.train_seconds:.0f}s of training"
    )
    print(
        f"  saved to {out}: config.json (with id2label), model.safetensors, vocab.txt, eval_results.json,\n"
        f"  metrics.jsonl and metrics.png; transformers' AutoModelForSequenceClassification loads it as is."
    )
    return out


def step_classify(model_dir: Path) -> None:
    from bertkit.pipelines import pipeline

    banner(4, "classify new sentences", "pipeline('text-classification', model=runs/demo/polarity)")
    clf = pipeline("text-classification", model=model_dir)
    sentences = [
        "a warm , funny and beautifully acted film that stays with you .",
        "the plot is a mess and the jokes fall flat .",
        "not the best film of the year , but an honest and moving one .",
        "two hours of my life i will never get back .",
    ]
    for s, r in zip(sentences, clf(sentences)):
        print(f"  {r['label']:>8s} {r['score']:.2f}  {s}")


def step_explain(model_dir: Path) -> None:
    from bertkit.explain import explain

    banner(
        5,
        "look inside the fine-tuned model",
        'bertkit explain --model runs/demo/polarity "..." --output runs/demo/explain.html --verify\n'
        "One self-contained page (open it offline in any browser), and every step of the model\n"
        "rebuilt from the raw weights with plain tensor code and compared with the model's output.",
    )
    res = explain(
        model_dir,
        "not the best film of the year , but an honest and moving one .",
        output=RUN / "explain.html",
        verify_weights=True,
        overwrite=True,
    )
    worst = max(c.max_diff for c in res.checks)
    print(
        f"  from-scratch check: {sum(c.ok for c in res.checks)} of {len(res.checks)} steps match "
        f"(largest |difference| {worst:.1e})"
    )
    if not res.ok:
        raise RuntimeError("the from-scratch check failed: " + ", ".join(c.name for c in res.checks if not c.ok))
    print(f"  report: {res.html.resolve()}")


FAILED: list[str] = []


def run_step(name: str, fn, *a):
    """Run one step; a failure is reported and the demo goes on, but `make demo` then exits non-zero."""
    try:
        return fn(*a)
    except Exception as e:  # the traceback says what broke
        traceback.print_exc()
        print(f"\n  [{name} failed: {type(e).__name__}: {e}]")
        FAILED.append(name)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description="bertkit's main story on CPU")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--pretrain-minutes", type=float, default=4.0)
    ap.add_argument("--pretrain-steps", type=int, default=2500, help="sets the lr schedule; minutes cap it")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--quick", action="store_true", help="a shorter run: 1 minute of pretraining, 800 sentences")
    args = ap.parse_args()
    if args.quick:
        args.pretrain_minutes = min(args.pretrain_minutes, 1.0)
        args.pretrain_steps = min(args.pretrain_steps, 150)
    os.environ.setdefault("BERTKIT_ASSETS", str(ROOT / ".assets"))
    RUN.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print(f"bertkit demo: outputs under {RUN}")
    vocab = run_step("step 1", step_vocab, args)
    run_step("step 2", step_pretrain, args, vocab)
    model_dir = run_step("step 3", step_finetune, args)
    if model_dir is not None:
        run_step("step 4", step_classify, model_dir)
        run_step("step 5", step_explain, model_dir)
    else:
        print("\n  [steps 4 and 5 skipped: they need the fine-tuned model of step 3]")
    print(
        f"\nDone in {(time.perf_counter() - t0) / 60:.1f} minutes. Try next:\n"
        f"  bertkit predict --model {RUN / 'polarity'} --input my_sentences.csv\n"
        f'  bertkit fill-mask --model {RUN / "pretrain"} "she was the [MASK] of the family ."\n'
        f'  bertkit explain --model {RUN / "pretrain"} "she was the [MASK] of the family ." '
        f"--output {RUN / 'explain_mlm.html'}"
    )
    if FAILED:
        print(f"\nFAILED: {', '.join(FAILED)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
