"""`bertkit pretrain --objective mlm | electra` on real text (Austen, Wikipedia, BBC News slices).

* ``mlm``: contiguous full-length instances; the output is a BertForMaskedLM that transformers loads
  with equal logits.
* ``electra``: the discriminator in OUTPUT and the generator in OUTPUT/generator load in transformers
  with equal logits and share their embeddings; metrics.jsonl holds the generator's MLM accuracy and
  the discriminator's accuracy and AUC; a run resumed from its step-3 checkpoint repeats the
  uninterrupted run's losses exactly (token sampling included); fine-tuning, evaluation and
  prediction work on the discriminator folder; one training step's loss and gradients equal those of
  transformers' generator and discriminator with shared embeddings, on the same batch and samples.
* Bad input: a BERT --model for --objective electra, a generator size that splits a head.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.cli import main as cli_main
from bertkit.data import ShardedCorpus, create_contiguous_instances, ensure_prepared
from bertkit.training.pretraining import PretrainingArguments, pretrain

transformers = pytest.importorskip("transformers")


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    d = tmp_path_factory.mktemp("corpus")
    austen = d / "austen.txt"
    austen.write_text("\n".join(asset_path("austen").read_text(encoding="utf-8").splitlines()[:300]) + "\n")
    wiki = d / "wiki.txt"
    wiki.write_text("\n".join(asset_path("wiki").read_text(encoding="utf-8").splitlines()[:150]) + "\n")
    bbc = d / "bbc.jsonl"
    bbc.write_text("".join(asset_path("bbcnews-train").read_text(encoding="utf-8").splitlines(True)[:20]))
    return [str(austen), str(wiki), str(bbc)]


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("BERTKIT_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def _args(corpus: list[str], out: Path, **kw) -> PretrainingArguments:
    base = dict(
        output=str(out),
        corpus=corpus,
        vocab=str(asset_path("vocab-uncased")),
        config="tiny",
        seq_len=32,
        batch_size=8,
        max_steps=6,
        lr=5e-4,
        warmup_steps=2,
        save_every=3,
        eval_every=3,
        eval_instances=24,
        seed=3,
        threads=1,
        progress=False,
        precision="fp32",
    )
    return PretrainingArguments(**{**base, **kw})


def _encode(folder: Path) -> dict:
    tok = transformers.BertTokenizerFast(str(folder / "vocab.txt"))
    return tok(
        ["it is a truth universally [MASK] , that a single man", "the minister [MASK] a letter ."],
        padding=True,
        return_tensors="pt",
    )


@pytest.fixture(scope="module")
def electra_run(tmp_path_factory, corpus) -> Path:
    out = tmp_path_factory.mktemp("electra") / "out"
    pretrain(_args(corpus, out, objective="electra", generator_size=0.5))
    return out


def test_contiguous_instances_are_full_length_and_use_every_token_once(corpus):
    folder = ensure_prepared(corpus, asset_path("vocab-uncased"), "prose", True, progress=False)
    c = ShardedCorpus(folder)
    docs = np.arange(c.num_documents)
    rows = create_contiguous_instances(c, docs, 32)
    lengths = (rows[:, 1] - rows[:, 0]) + (rows[:, 3] - rows[:, 2])
    crossing = rows[:, 3] > rows[:, 2]
    assert crossing.any() and (~crossing).any()
    assert (lengths[:-1][~crossing[:-1]] == 30).all() and (lengths[:-1][crossing[:-1]] == 29).all()
    used = np.concatenate([np.arange(a, b) for r in rows for a, b in ((r[0], r[1]), (r[2], r[3]))])
    assert np.array_equal(np.sort(used), np.arange(c.num_tokens))  # every token once, in order of documents
    assert (rows[:, 4] == -100).all()  # no next-sentence labels


def test_electra_folders_load_in_transformers_with_equal_logits(electra_run):
    from bertkit.modeling.electra import ElectraForMaskedLM, ElectraForPreTraining

    gen_dir = electra_run / "generator"
    assert json.loads((electra_run / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    assert (gen_dir / "vocab.txt").is_file()
    enc = _encode(electra_run)
    real = enc["attention_mask"].bool()
    disc, gen = (
        ElectraForPreTraining.from_pretrained(electra_run).eval(),
        ElectraForMaskedLM.from_pretrained(gen_dir).eval(),
    )
    ref_d = transformers.ElectraForPreTraining.from_pretrained(electra_run).eval()
    ref_g = transformers.ElectraForMaskedLM.from_pretrained(gen_dir).eval()
    with torch.no_grad():
        torch.testing.assert_close(disc(**enc).logits[real], ref_d(**enc).logits[real], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(gen(**enc).logits[real], ref_g(**enc).logits[real], atol=1e-5, rtol=1e-5)
    assert gen.config.hidden_size == disc.config.hidden_size // 2
    assert gen.config.num_attention_heads == disc.config.num_attention_heads // 2
    # the embeddings were one module during training: both folders hold the same trained values
    for name, p in disc.electra.embeddings.state_dict().items():
        assert torch.equal(p, gen.electra.embeddings.state_dict()[name]), name
    init = ElectraForPreTraining(disc.config)
    assert not torch.equal(init.electra.embeddings.LayerNorm.weight, disc.electra.embeddings.LayerNorm.weight)


def test_electra_training_step_equals_transformers_pair(electra_run, corpus):
    """One training step's loss and every gradient equal transformers' generator and discriminator
    with the embeddings shared, fed the same masked batch and the same sampled replacements."""
    from bertkit.data.replaced_tokens import electra_collator, replace_with_samples
    from bertkit.modeling.electra import ElectraForMaskedLM, ElectraForPreTraining
    from bertkit.tokenization import load_tokenizer, load_vocab
    from bertkit.training.objectives import DISCRIMINATOR_WEIGHT, ElectraPretrainingModel, electra_loss

    vocab = list(load_vocab(electra_run / "vocab.txt"))
    tok = load_tokenizer(electra_run / "vocab.txt", True)
    lines = [line for line in Path(corpus[0]).read_text(encoding="utf-8").splitlines() if len(line) > 60][:16]
    items = [{"input_ids": tok.encode(line)[:32]} for line in lines]
    batch = electra_collator(vocab, 0.15, seed=11)(items)
    assert batch["attention_mask"].eq(0).any()  # padding is in the batch: the BCE must skip it

    disc, gen = (
        ElectraForPreTraining.from_pretrained(electra_run),
        ElectraForMaskedLM.from_pretrained(electra_run / "generator"),
    )
    ours = ElectraPretrainingModel(disc, gen).eval()  # no dropout, so the two forward passes are comparable
    loss, logs = electra_loss(ours, {**batch, "sampler": torch.Generator().manual_seed(5)})
    loss.backward()

    ref_d = transformers.ElectraForPreTraining.from_pretrained(electra_run).eval()
    ref_g = transformers.ElectraForMaskedLM.from_pretrained(electra_run / "generator").eval()
    ref_g.electra.embeddings = ref_d.electra.embeddings
    ref_g.generator_lm_head.weight = ref_d.electra.embeddings.word_embeddings.weight
    common = {k: batch[k] for k in ("attention_mask", "token_type_ids")}
    gen = ref_g(input_ids=batch["input_ids"], labels=batch["labels"], **common)
    chosen = batch["labels"] != -100
    replaced, is_replaced = replace_with_samples(
        gen.logits.detach()[chosen], batch["input_ids"], batch["labels"], torch.Generator().manual_seed(5)
    )
    assert 0 < int(is_replaced.sum()) < int(chosen.sum()) + 1
    disc = ref_d(input_ids=replaced, labels=is_replaced, **common)
    ref_loss = gen.loss + DISCRIMINATOR_WEIGHT * disc.loss
    ref_loss.backward()

    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logs["disc_loss"], disc.loss, atol=1e-6, rtol=1e-5)
    theirs = {f"discriminator.{n}": p.grad for n, p in ref_d.named_parameters()}
    shared = "electra.embeddings."  # the generator's are the discriminator's
    theirs.update({f"generator.{n}": p.grad for n, p in ref_g.named_parameters() if not n.startswith(shared)})
    mine = {n: p.grad for n, p in ours.named_parameters()}
    assert mine.keys() == {n for n in theirs if "generator_lm_head.weight" not in n}  # tied to the embeddings
    scale = max(float(g.abs().max()) for g in theirs.values() if g is not None)
    for name, grad in mine.items():
        assert grad is not None and theirs[name] is not None, name
        # atol relative to the largest gradient: a key bias's true gradient is 0, both hold rounding
        torch.testing.assert_close(grad, theirs[name], atol=1e-5 * scale, rtol=1e-4, msg=name)


def test_electra_metrics_and_plot(electra_run):
    rows = _rows(electra_run)
    train = [r for r in rows if "loss" in r]
    assert len(train) == 6
    for r in train:
        assert {"mlm_loss", "disc_loss", "mlm_accuracy", "disc_accuracy", "replaced_fraction"} <= set(r)
        assert r["loss"] == pytest.approx(r["mlm_loss"] + 50 * r["disc_loss"], rel=1e-5)
        assert "nsp_loss" not in r
    evals = [r for r in rows if "eval_disc_auc" in r]
    assert evals, rows
    e = evals[-1]
    assert 0 <= e["eval_disc_auc"] <= 1 and 0 <= e["eval_disc_accuracy"] <= 1 and 0 <= e["eval_mlm_accuracy"] <= 1
    assert 0 < e["eval_replaced_fraction"] < 0.2  # at most the masked 15% (minus lucky samples)
    assert (electra_run / "metrics.png").is_file()


def test_electra_resume_repeats_the_run_exactly(electra_run, corpus, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(electra_run, out)
    # a run killed between its step-3 and step-6 checkpoints
    shutil.rmtree(out / "checkpoints" / "step-0000006")
    for name in ("generator", "model.safetensors", "config.json"):
        p = out / name
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    with pytest.raises(ValueError, match="objective"):  # another objective is another run
        pretrain(_args(corpus, out, objective="mlm", resume=True))
    with pytest.raises(ValueError, match="generator_temperature"):  # other replacements: another run
        pretrain(_args(corpus, out, objective="electra", generator_size=0.5, generator_temperature=2.0, resume=True))
    res = pretrain(_args(corpus, out, objective="electra", generator_size=0.5, resume=True))
    assert res.step == 6
    full = [r for r in _rows(electra_run) if "loss" in r]
    again = [r for r in _rows(out) if "loss" in r]
    assert [r["step"] for r in again] == list(range(1, 7))
    for key in ("loss", "mlm_loss", "disc_loss", "disc_accuracy", "lr"):
        assert [r[key] for r in again] == [r[key] for r in full], key
    evals = lambda rows: [r for r in rows if "eval_disc_auc" in r]  # noqa: E731
    assert evals(_rows(out))[-1]["eval_disc_auc"] == evals(_rows(electra_run))[-1]["eval_disc_auc"]


def test_finetune_evaluate_predict_on_the_discriminator(electra_run, tmp_path, capsys):
    from bertkit.modeling.electra import ElectraForSequenceClassification
    from bertkit.tasks import finetune, predict

    lines = asset_path("polarity-train").read_text(encoding="utf-8").splitlines()
    data = tmp_path / "train.csv"
    data.write_text("\n".join(lines[:33]) + "\n", encoding="utf-8")
    out = tmp_path / "ft"
    finetune(
        "text-classification",
        electra_run,
        data,
        out,
        data,
        epochs=1,
        batch_size=16,
        max_length=32,
        progress=False,
        quiet=True,
    )
    net = transformers.AutoModelForSequenceClassification.from_pretrained(str(out))
    assert type(net).__name__ == "ElectraForSequenceClassification"
    assert type(ElectraForSequenceClassification.from_pretrained(out)).__name__ == type(net).__name__
    rows = predict(out, data, progress=False)
    assert len(rows) == 32 and {r["label"] for r in rows} <= {"negative", "positive"}
    # the scores are transformers' ElectraForSequenceClassification probabilities on the same folder
    enc = transformers.AutoTokenizer.from_pretrained(str(out))(
        [r["text"] for r in rows], padding=True, truncation=True, max_length=32, return_tensors="pt"
    )
    with torch.no_grad():
        probs = net.eval()(**enc).logits.softmax(-1)
    got = torch.tensor([[r["scores"][net.config.id2label[i]] for i in range(2)] for r in rows])
    assert (got - probs).abs().max() < 1e-5
    assert cli_main(["evaluate", "--model", str(out), "--data", str(data), "--no-progress"]) == 0
    assert "accuracy" in capsys.readouterr().out


def test_mlm_objective_outputs_a_masked_lm_transformers_loads(corpus, tmp_path):
    from bertkit.modeling import BertForMaskedLM

    out = tmp_path / "mlm"
    pretrain(_args(corpus, out, objective="mlm", mask_prob=0.2, save_every=0))
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    train = [r for r in _rows(out) if "loss" in r]
    assert len(train) == 6 and all("nsp_loss" not in r and r["loss"] == r["mlm_loss"] for r in train)
    assert any("eval_mlm_accuracy" in r for r in _rows(out))
    enc = _encode(out)
    real = enc["attention_mask"].bool()
    with torch.no_grad():
        a = BertForMaskedLM.from_pretrained(out).eval()(**enc).logits[real]
        b = transformers.BertForMaskedLM.from_pretrained(out).eval()(**enc).logits[real]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("objective", ["mlm", "mlm+nsp"])
def test_cls_bag_of_words_step_equals_transformers_with_the_loss_written_out(corpus, tmp_path, objective):
    """--cls-bow-weight: the loss and every gradient equal transformers' model of the same weights
    with the objective written out densely here: masked-LM cross-entropy over the masked tokens (+ NSP)
    plus the weight x the cross-entropy of the [CLS] position's MLM logits against the uniform
    distribution over the distinct real, non-special tokens of the sequence before masking."""
    from bertkit.data.collator import MaskingCollator
    from bertkit.modeling import BertConfig, BertForMaskedLM, BertForPreTraining
    from bertkit.tokenization import load_tokenizer, load_vocab
    from bertkit.training.mlm import mlm_nsp_loss
    from bertkit.training.objectives import cls_bag_of_words_loss, mlm_loss

    vocab = list(load_vocab(asset_path("vocab-uncased")))
    tok = load_tokenizer(asset_path("vocab-uncased"), True)
    lines = [line for line in Path(corpus[0]).read_text(encoding="utf-8").splitlines() if len(line) > 60][:12]
    items = [{"input_ids": tok.encode(line)[: 14 + i]} for i, line in enumerate(lines)]
    batch = MaskingCollator(vocab, mask_prob=0.3, seed=4)(items)
    assert batch["attention_mask"].eq(0).any() and (batch["labels"][:, 0] == -100).all()
    nsp = objective == "mlm+nsp"
    if nsp:
        batch["next_sentence_label"] = torch.arange(len(items)) % 2
    torch.manual_seed(0)
    cfg = BertConfig.from_preset("tiny", vocab_size=len(vocab))
    ours = (BertForPreTraining if nsp else BertForMaskedLM)(cfg).eval()
    ours.save_pretrained(tmp_path / "m")
    special = [vocab.index(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]")]
    weight = 0.7
    loss, logs = cls_bag_of_words_loss(mlm_nsp_loss if nsp else mlm_loss, weight, special)(ours, dict(batch))
    loss.backward()

    ref_cls = transformers.BertForPreTraining if nsp else transformers.BertForMaskedLM
    ref = ref_cls.from_pretrained(tmp_path / "m").eval()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    out = ref(**inputs)
    logits = out.prediction_logits if nsp else out.logits  # (B, N, V)
    labels = batch["labels"]
    mlm = torch.nn.functional.cross_entropy(logits[labels != -100], labels[labels != -100])
    ref_bows = []
    for b in range(len(items)):
        real = [
            int(labels[b, j]) if labels[b, j] != -100 else int(batch["input_ids"][b, j])
            for j in range(labels.shape[1])
            if batch["attention_mask"][b, j]
        ]
        words = sorted(set(real) - set(special))
        assert len(words) > 3 and vocab.index("[MASK]") not in words
        ref_bows.append(-torch.log_softmax(logits[b, 0], -1)[words].mean())
    bow = torch.stack(ref_bows).mean()
    ref_loss = mlm + weight * bow
    if nsp:
        ref_loss = ref_loss + torch.nn.functional.cross_entropy(
            out.seq_relationship_logits, batch["next_sentence_label"]
        )
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logs["cls_bow_loss"], bow, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logs["mlm_loss"], mlm, atol=1e-5, rtol=1e-5)
    theirs = dict(ref.named_parameters())
    scale = max(float(p.grad.abs().max()) for p in theirs.values() if p.grad is not None)
    for name, p in ours.named_parameters():
        if theirs[name].grad is None:  # the pooler: no NSP label without NSP
            assert p.grad is None or not p.grad.any(), name
            continue
        torch.testing.assert_close(p.grad, theirs[name].grad, atol=1e-5 * scale, rtol=1e-4, msg=name)


def test_cls_bag_of_words_in_a_run_logs_its_loss_and_is_part_of_the_runs_identity(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    argv = _cli(corpus, out, "--objective", "mlm", "--cls-bow-weight", "1", "--save-every", "1")
    assert cli_main(argv) == 0
    rows = [r for r in _rows(out) if "loss" in r]
    assert len(rows) == 2 and all(r["loss"] > r["mlm_loss"] and r["cls_bow_loss"] > 0 for r in rows)
    # math.log(30522) ~ 10.3: an untrained [CLS] spreads its guess over the whole vocabulary
    assert all(abs(r["loss"] - r["mlm_loss"] - r["cls_bow_loss"]) < 1e-3 for r in rows)
    capsys.readouterr()
    changed = [*_cli(corpus, out, "--objective", "mlm", "--cls-bow-weight", "2", "--save-every", "1"), "--resume"]
    assert cli_main(changed) == 1
    assert "cls_bow_weight" in capsys.readouterr().err


def _cli(corpus: list[str], out: Path, *extra: str) -> list[str]:
    return [
        "pretrain",
        "--corpus",
        *corpus,
        "--vocab",
        str(asset_path("vocab-uncased")),
        "--config",
        "tiny",
        "--seq-len",
        "32",
        "--batch-size",
        "8",
        "--max-steps",
        "2",
        "--threads",
        "1",
        "--no-progress",
        "--output",
        str(out),
        *extra,
    ]


def test_bad_input_one_line(corpus, tmp_path, capsys):
    bert = tmp_path / "bert"
    from bertkit.modeling import BertConfig, BertForMaskedLM

    BertForMaskedLM(BertConfig.from_preset("tiny")).save_pretrained(bert)
    argv = _cli(corpus, tmp_path / "a", "--objective", "electra", "--model", str(bert))
    del argv[argv.index("--config") : argv.index("--config") + 2]  # the model folder has its size
    assert cli_main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "--objective electra" in err[0] and "'bert' model" in err[0] and str(bert) in err[0]
    # the tiny preset has 2 heads: a quarter-size generator, asked for, would have half a head
    assert cli_main(_cli(corpus, tmp_path / "b", "--objective", "electra", "--generator-size", "0.25")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "--generator-size 0.25" in err[0] and "0.5 attention heads" in err[0] and "0.5, 1" in err[0]
    assert "at least one" in err[0]
    assert not (tmp_path / "b").exists()
    with pytest.raises(SystemExit) as e:  # argparse: exit 2
        cli_main(_cli(corpus, tmp_path / "c", "--objective", "electra", "--generator-size", "0"))
    assert e.value.code == 2 and "--generator-size: must be a number in (0, 1], got '0'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="objective must be one of mlm\\+nsp, mlm, electra"):
        PretrainingArguments(output=str(tmp_path / "d"), objective="rtd")


def test_default_generator_is_whole_heads_of_the_discriminators_size_for_every_preset():
    """The default quarter-size generator split the tiny preset's two heads into half a head."""
    from bertkit.modeling import BertConfig
    from bertkit.modeling.config import PRESETS
    from bertkit.training.objectives import generator_shape

    for name in PRESETS:
        cfg = BertConfig.from_preset(name)
        hidden, heads = generator_shape(cfg.hidden_size, cfg.num_attention_heads, None)
        head_size = cfg.hidden_size // cfg.num_attention_heads
        assert heads >= 1 and hidden == heads * head_size, name
        assert heads == max(1, round(cfg.num_attention_heads / 4)), name


def test_tiny_electra_runs_with_the_default_generator(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli_main(_cli(corpus, out, "--objective", "electra", "--save-every", "0", "--eval-every", "0")) == 0
    gen = json.loads((out / "generator" / "config.json").read_text(encoding="utf-8"))
    disc = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert (gen["num_attention_heads"], gen["hidden_size"]) == (1, disc["hidden_size"] // disc["num_attention_heads"])
    # continuing the run: its own generator is kept; a --generator-size that disagrees is refused
    more = tmp_path / "more"
    argv = _cli(corpus, more, "--objective", "electra", "--model", str(out), "--generator-size", "1")
    del argv[argv.index("--config") : argv.index("--config") + 2]  # the model folder has its size
    assert cli_main(argv) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bertkit pretrain: error")]
    assert len(err) == 1 and "--generator-size 1" in err[0] and f"--model {out}" in err[0] and " 64 " in err[0]
    assert not more.exists()


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--model", "MODEL"], ["--config tiny", "--model"]),
        (["--model", "MODEL", "--config", "mini"], ["--config mini", "--model"]),
        (["--generator-size", "0.5"], ["--generator-size 0.5", "--objective mlm+nsp"]),
        (["--objective", "mlm", "--generator-temperature", "2"], ["--generator-temperature 2", "--objective mlm"]),
        (["--objective", "electra", "--cls-bow-weight", "1"], ["--cls-bow-weight 1", "--objective electra"]),
        (["--data", "DATA", "--format", "bert"], ["--format bert", "--data"]),
    ],
)
def test_a_flag_the_run_would_ignore_is_refused(corpus, tmp_path, capsys, extra, named):
    """`pretrain --model DIR --config X` trained DIR at its own size and never said --config was ignored."""
    from bertkit.modeling import BertConfig, BertForPreTraining

    model = tmp_path / "model"
    BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=30522)).save_pretrained(model)
    shutil.copy(asset_path("vocab-uncased"), model / "vocab.txt")
    extra = [str(model) if a == "MODEL" else str(tmp_path) if a == "DATA" else a for a in extra]
    argv = _cli(corpus, tmp_path / "out", *extra)
    if "--data" in extra:
        i = argv.index("--corpus")
        del argv[i : i + 1 + len(corpus)]
    if "--config" in extra:  # only the one given in extra
        i = argv.index("--config")
        del argv[i : i + 2]
    rc = cli_main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 2 and all(n in err[0] for n in named), err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="config='small' sizes a new model"):
        pretrain(_args(corpus, tmp_path / "api", model=str(model), config="small"))


def test_resuming_a_finished_run_changes_nothing(corpus, tmp_path, capsys):
    """--resume of a finished run evaluated again and appended a second end row to metrics.jsonl."""
    out = tmp_path / "out"
    argv = _cli(corpus, out, "--objective", "mlm", "--eval-every", "1", "--eval-instances", "8", "--save-every", "1")
    assert cli_main(argv) == 0
    before = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    capsys.readouterr()
    assert cli_main([*argv, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "already finished at step 2; nothing to do" in err, err
    assert (out / "metrics.jsonl").read_bytes() == before[Path("metrics.jsonl")]
    after = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert after.keys() == before.keys()
    assert all(after[k] == before[k] for k in after if k.name != ".bertkit-output.json"), [
        k for k in after if after[k] != before[k]
    ]


def test_resuming_a_finished_run_without_checkpoints_changes_nothing(corpus, tmp_path, capsys):
    """A finished run that kept no checkpoint (no --save-every) was trained again from scratch on
    --resume, its metrics deleted first; it is left as it is, and the command says why."""
    out = tmp_path / "out"
    argv = _cli(corpus, out, "--objective", "mlm")
    assert cli_main(argv) == 0
    assert not (out / "checkpoints").exists()
    before = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    capsys.readouterr()
    assert cli_main([*argv, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "already finished and kept nothing to continue from" in err, err
    after = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert after == before
    # a run that did not finish (no list of files in its marker) still starts over on --resume
    marker = json.loads((out / ".bertkit-output.json").read_text())
    marker.pop("files")
    (out / ".bertkit-output.json").write_text(json.dumps(marker))
    assert cli_main([*argv, "--resume"]) == 0
    assert "starting fresh" in capsys.readouterr().err


def test_roc_auc_equals_the_pairwise_definition():
    from bertkit.tasks.metrics import roc_auc

    rng = np.random.default_rng(0)
    scores = np.round(rng.normal(size=300), 1)  # rounded: many ties
    labels = (rng.random(300) < 0.3).astype(int)
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert roc_auc(scores, labels) == pytest.approx(pairs, abs=1e-12)
    assert np.isnan(roc_auc([0.1, 0.2], [1, 1]))


@pytest.mark.slow
def test_electra_under_torchrun_two_processes(corpus, tmp_path):
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "ddp"
    # CPU DDP over gloo: on a machine with GPUs the ranks would otherwise take them.
    env = dict(os.environ, OMP_NUM_THREADS="1", BERTKIT_CACHE=str(tmp_path / "cache"), CUDA_VISIBLE_DEVICES="")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={port}",
        "-m",
        "bertkit",
        *_cli(
            corpus,
            out,
            "--objective",
            "electra",
            "--generator-size",
            "0.5",
            "--precision",
            "fp32",
            "--eval-instances",
            "16",
        ),
    ]
    r = subprocess.run(cmd, env=env, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "2 process(es)" in r.stderr
    train = [x for x in _rows(out) if "loss" in x]
    assert [x["step"] for x in train] == [1, 2] and all("disc_loss" in x for x in train)
    assert (out / "generator" / "model.safetensors").is_file()
    transformers.ElectraForPreTraining.from_pretrained(out)


def test_replacements_follow_the_generator_softmax():
    from bertkit.data.replaced_tokens import replace_with_samples, sample_from_logits

    logits = torch.tensor([[2.0, 0.0, -1.0, 1.0, -30.0]]).repeat(200_000, 1)
    g = torch.Generator().manual_seed(0)
    counts = torch.bincount(sample_from_logits(logits, g), minlength=5).double() / len(logits)
    expected = torch.softmax(logits[0].double(), -1)
    assert torch.allclose(counts, expected, atol=4e-3), (counts, expected)  # ~4 standard errors
    assert counts[4] == 0  # probability 1e-14
    # at temperature 4 the samples follow softmax(logits / 4), flatter than softmax(logits)
    counts = torch.bincount(sample_from_logits(logits, g, temperature=4.0), minlength=5).double() / len(logits)
    expected = torch.softmax(logits[0].double() / 4, -1)
    assert torch.allclose(counts, expected, atol=4e-3), (counts, expected)
    ids = torch.tensor([[101, 103, 7, 103, 102, 0]])
    labels = torch.tensor([[-100, 5, -100, 9, -100, -100]])
    picked = torch.tensor([[-50.0] * 12, [-50.0] * 12])
    picked[0, 5], picked[1, 11] = 50.0, 50.0  # first masked position -> its original, second -> 11
    replaced, is_replaced = replace_with_samples(picked, ids, labels, g)
    assert replaced.tolist() == [[101, 5, 7, 11, 102, 0]]
    assert is_replaced.tolist() == [[0, 0, 0, 1, 0, 0]]  # a sample equal to the original is not "replaced"


@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_dropout_is_a_setting_of_the_run_and_the_saved_config_keeps_the_models_rates(corpus, tmp_path, objective):
    """--dropout 0 trains without dropout (two forward passes in training mode agree, and the run's
    identity records 0), while the saved config keeps the preset's rates, which fine-tuning uses."""
    from bertkit.modeling import BertConfig
    from bertkit.training.objectives import build_objective

    preset = BertConfig.from_preset("tiny")
    assert preset.hidden_dropout_prob > 0 and preset.attention_probs_dropout_prob > 0
    kw = dict(objective=objective, dropout=0.0, max_steps=2, save_every=0, eval_every=0)
    if objective == "electra":
        kw["generator_size"] = 0.5
    parts = build_objective(_args(corpus, tmp_path / "parts", **kw))
    model = parts["model"].train()
    batch = parts["collate"]([parts["train_dataset"][i] for i in range(4)])
    with torch.no_grad():
        torch.manual_seed(0)
        a, _ = parts["loss_fn"](model, batch)
        torch.manual_seed(1)
        b, _ = parts["loss_fn"](model, batch)
    if objective == "mlm":  # ELECTRA's generator samples its replacements, so only MLM is deterministic
        assert float(a) == float(b)
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))

    out = tmp_path / "run"
    pretrain(_args(corpus, out, **kw))
    for folder in (out, out / "generator") if objective == "electra" else (out,):
        cfg = json.loads((folder / "config.json").read_text())
        assert cfg["hidden_dropout_prob"] == preset.hidden_dropout_prob
        assert cfg["attention_probs_dropout_prob"] == preset.attention_probs_dropout_prob
    marker = json.loads((out / ".bertkit-output.json").read_text())
    assert marker["run"]["model"]["hidden_dropout_prob"] == 0.0
    assert marker["run"]["model"]["attention_probs_dropout_prob"] == 0.0


def test_a_time_schedule_without_max_steps_runs_on_the_clock(corpus, tmp_path, monkeypatch):
    """`pretrain --schedule time --max-minutes M` without --max-steps trains for the M minutes: the
    default step count (shrunk here to 4 so the test is quick) sizes step-schedule runs only. A
    --warmup-ratio there has no step count to be a share of, and is refused by name."""
    import bertkit.training.training_args as arguments

    monkeypatch.setattr(arguments, "DEFAULT_STEPS", 4)
    kw = dict(max_steps=None, save_every=0, eval_every=0)
    pretrain(_args(corpus, tmp_path / "steps", **kw))
    assert max(r["step"] for r in _rows(tmp_path / "steps")) == 4

    budget = 0.04  # minutes of training
    pretrain(_args(corpus, tmp_path / "time", schedule="time", max_minutes=budget, log_every=1, **kw))
    rows = [r for r in _rows(tmp_path / "time") if "lr" in r]
    assert rows[-1]["step"] > 4  # went past the step default
    assert rows[-1]["train_seconds"] >= 0.9 * 60 * budget  # and ended on the clock
    # on a learning rate decayed with the clock: at most the decay at the training time two rows before
    # (the rate is read at the top of a step), however slow a step of a loaded machine is
    assert len(rows) >= 3 and rows[-1]["lr"] < 0.5 * 5e-4
    assert rows[-1]["lr"] <= 5e-4 * max(0.0, 1 - rows[-3]["train_seconds"] / (60 * budget)) + 2e-6

    with pytest.raises(ValueError, match="warmup_ratio=0.1 is a share of max_steps"):
        _args(corpus, tmp_path / "bad", schedule="time", max_minutes=1, warmup_steps=0, warmup_ratio=0.1, **kw)


def test_a_corpus_that_holds_nothing_out_says_so(tmp_path, capsys):
    """One document cannot be split into training and held-out text: --eval-every then measured nothing
    and wrote evaluation rows with no metric, without a word. Now the run says so at its start."""
    one = tmp_path / "one.txt"
    one.write_text("\n".join(asset_path("austen").read_text(encoding="utf-8").splitlines()[:120]) + "\n")
    pretrain(_args([str(one)], tmp_path / "out", max_steps=3, eval_every=3, save_every=0))
    err = capsys.readouterr().err
    assert "0 held-out instances" in err and "no document could be held out" in err
