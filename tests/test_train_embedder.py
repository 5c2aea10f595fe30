"""`bertkit train-embedder` on the real MiniLM checkpoint and real BBC sentences: an interrupted run
resumes to the same weights as an uninterrupted one, the folder loads in sentence-transformers with
the same embeddings, validation metrics are logged, hard negatives are mined in bounded memory, and
bad input gets one line."""

import csv
import json
import re
import warnings

import numpy as np
import pytest
import torch
from conftest import card_log_table
from safetensors.torch import load_file

from bertkit.assets import asset_path
from bertkit.cli import main

MINILM = str(asset_path("minilm"))
FAST = ["--batch-size", "8", "--max-length", "48", "--no-progress"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """anchor = an article's first sentence, positive = its next two; a corpus of other passages."""
    d = tmp_path_factory.mktemp("emb-data")
    rows, corpus = [], []
    for line in open(asset_path("bbcnews-test"), encoding="utf-8"):
        s = [x for x in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if len(x) > 20]
        if len(s) >= 5:
            rows.append({"anchor": s[0], "positive": " ".join(s[1:3])})
            corpus.append(" ".join(s[3:5]))
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:32]))
    (d / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[100:116]))
    (d / "corpus.txt").write_text("\n".join(corpus[:200]) + "\n")
    return d


def _weights(folder):
    return load_file(str(folder / "model.safetensors"))


def test_interrupted_run_resumes_exactly_and_loads_in_sentence_transformers(data, tmp_path, monkeypatch):
    from bertkit.training import trainer as T

    common = [
        "train-embedder",
        "--model",
        MINILM,
        "--train",
        str(data / "train.jsonl"),
        "--validation",
        str(data / "val.jsonl"),
        "--max-steps",
        "4",
        "--save-every",
        "2",
        "--eval-every",
        "2",
        *FAST,
    ]
    assert main([*common, "--output", str(tmp_path / "full")]) == 0
    original = T.Trainer._maybe_eval_or_save

    def killed_after_step_2(self, *args):
        original(self, *args)
        if self.step == 2:
            raise KeyboardInterrupt  # as if killed right after the step-2 checkpoint

    monkeypatch.setattr(T.Trainer, "_maybe_eval_or_save", killed_after_step_2)
    assert main([*common, "--output", str(tmp_path / "cut")]) == 130
    monkeypatch.setattr(T.Trainer, "_maybe_eval_or_save", original)
    assert main([*common, "--output", str(tmp_path / "cut"), "--resume"]) == 0

    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "cut")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    rows_b = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in rows if "loss" in r] == [r["loss"] for r in rows_b if "loss" in r]
    assert all(r["tokens_per_sec"] > 0 for r in rows if "loss" in r)
    evals = [r for r in rows if "eval_mrr@10" in r]
    assert [r["step"] for r in evals] == [2, 4] and 0 < evals[-1]["eval_ndcg@10"] <= 1
    assert (tmp_path / "full" / "metrics.png").is_file()
    base = load_file(str(asset_path("minilm") / "model.safetensors"))
    assert not torch.equal(
        base["encoder.layer.0.attention.self.query.weight"], a["encoder.layer.0.attention.self.query.weight"]
    )  # it trained

    st = pytest.importorskip("sentence_transformers")
    from bertkit import pipeline

    texts = [json.loads(x)["anchor"] for x in (data / "val.jsonl").read_text().splitlines()]
    want = st.SentenceTransformer(str(tmp_path / "full"), device="cpu").encode(texts, convert_to_numpy=True)
    got = np.asarray(pipeline("sentence-embedding", model=tmp_path / "full")(texts))
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)


def test_the_trained_folder_has_the_model_card_sentence_transformers_writes(data, tmp_path):
    """README.md after `train-embedder`: the loss's parameters are sentence-transformers' own
    get_config_dict() of the loss the flags stand for, the data size is the rows trained on, the flags
    that differ from their defaults are listed, and the log table holds the losses the run logged."""
    yaml = pytest.importorskip("yaml")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    out = tmp_path / "out"
    argv = ["train-embedder", "--model", MINILM, "--train", str(data / "train.jsonl"), "--output", str(out)]
    val = ["--validation", str(data / "val.jsonl")]
    assert main([*argv, *val, "--max-steps", "3", "--scale", "10", "--symmetric", *FAST]) == 0
    text = (out / "README.md").read_text(encoding="utf-8")
    head = yaml.safe_load(text.split("---\n", 2)[1])
    for tag in ("generated_from_trainer", "dataset_size:32", "loss:MultipleNegativesRankingLoss"):
        assert tag in head["tags"], tag
    config = re.search(r"`MultipleNegativesRankingLoss` with these parameters:\n  ```json\n(.*?)\n  ```", text, re.S)
    both = {"directions": ("query_to_doc", "doc_to_query"), "partition_mode": "per_direction"}  # --symmetric
    ref = MultipleNegativesRankingLoss(SentenceTransformer(str(out), device="cpu"), scale=10.0, **both)
    assert config and json.loads(config.group(1)) == json.loads(json.dumps(ref.get_config_dict()))
    assert "- `max_steps`: 3" in text and "- `scale`: 10.0" in text and "- `symmetric`: True" in text
    logged = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    want = {r["step"]: r["loss"] for r in logged if "loss" in r}
    rows = re.findall(r"^\| [\d.]+ \| (\d+) \| ([\d.]+) \|", text.split("### Training Logs", 1)[1], re.M)
    assert [int(s) for s, _ in rows] == sorted(want) == [1, 2, 3]
    assert all(abs(float(v) - want[int(s)]) <= 6e-5 for s, v in rows)
    assert "- **Output Dimensionality:** 384 dimensions" in text
    # The training data's statistics (its 32 rows, under 100) and first 3 rows, as sentence-transformers'
    # own card code computes them from the same columns with the saved model's tokenizer.
    train_rows = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()]
    cols = {k: [r[k] for r in train_rows] for k in ("anchor", "positive")}

    class Rows:  # a datasets.Dataset as that code reads one: a row by index, columns by slice
        def __len__(self):
            return len(train_rows)

        def __getitem__(self, i):
            return {k: v[i] for k, v in cols.items()}

    trained = SentenceTransformer(str(out), device="cpu")
    training = text.split("### Training Dataset", 1)[1].split("### Training Hyperparameters", 1)[0]
    assert "* Approximate statistics based on the first 32 samples:" in training
    stats_rows = [line for line in training.splitlines() if line.startswith("  | details |")]
    assert len(stats_rows) == 1
    for column in cols:
        theirs = trained.model_card_data._compute_column_stats(Rows(), column)
        assert theirs["dtype"] == "string" and theirs["data"]["min"].endswith(" tokens")
        listed = "<ul><li>" + "</li><li>".join(f"{k}: {v}" for k, v in theirs["data"].items()) + "</li></ul>"
        assert listed in stats_rows[0], (column, theirs)
    samples = training.split("* Samples:", 1)[1]
    for r in train_rows[:3]:
        assert f"| <code>{r['anchor']}</code> | <code>{r['positive']}</code> |" in samples
    assert f"<code>{train_rows[3]['anchor']}</code>" not in samples
    # The Evaluation section: sentence-transformers' own evaluator for the validation pairs, on the
    # saved model, gives the same scores (to the card's 4 decimals and a little float drift).
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    pairs = [json.loads(x) for x in (data / "val.jsonl").read_text().splitlines()]
    passages = list(dict.fromkeys(r["positive"] for r in pairs))
    ref = InformationRetrievalEvaluator(
        {f"q{i}": r["anchor"] for i, r in enumerate(pairs)},
        {f"d{i}": t for i, t in enumerate(passages)},
        {f"q{i}": {f"d{passages.index(r['positive'])}"} for i, r in enumerate(pairs)},
        name="val",
        write_csv=False,
    )(SentenceTransformer(str(out), device="cpu"))
    section = text.split("## Evaluation", 1)[1].split("## Training Details", 1)[0]
    assert "#### val" in section and "InformationRetrievalEvaluator" in section
    shown = {k: float(v) for k, v in re.findall(r"^\| \**([a-z0-9_@]+)\** \| \**([\d.]+)\** \|$", section, re.M)}
    assert {"cosine_ndcg@10", "cosine_mrr@10", "cosine_accuracy@1", "cosine_map@100"} <= set(shown)
    for key, value in shown.items():
        assert abs(value - ref[f"val_{key}"]) <= 1e-3, key
    # The log table shows each evaluation's nDCG@10 under the evaluator's name, as sentence-transformers'
    # trainer logs it; the last one is the final model's, which the Evaluation section shows too.
    evals = {r["step"]: r["eval_ndcg@10"] for r in logged if "eval_ndcg@10" in r}
    table = {int(r["Step"]): r["val_cosine_ndcg@10"] for r in card_log_table(text)}
    assert evals and {s for s, v in table.items() if v != "-"} == set(evals)
    assert all(abs(float(table[s]) - v) <= 6e-5 for s, v in evals.items())
    assert max(evals) == 3 and abs(evals[3] - shown["cosine_ndcg@10"]) <= 1e-3
    assert head["model-index"][0]["results"][0]["metrics"]  # the Hub's model-index from the same results
    # A rerun with --overwrite replaces the card it wrote, but not one a person has edited since.
    edited = text + "\nOur notes: evaluated on the team's queries.\n"
    (out / "README.md").write_text(edited, encoding="utf-8")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert main([*argv, "--max-steps", "2", "--overwrite", *FAST]) == 0
    about_card = [str(w.message) for w in said if "README.md" in str(w.message)]
    # said once, by the claim of the folder, and not again by each save that meets the same card
    assert len(about_card) == 1, about_card
    assert re.search(r"README.md changed since `bertkit train-embedder` wrote it: kept", about_card[0])
    assert (out / "README.md").read_text(encoding="utf-8") == edited
    rerun = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert max(r["step"] for r in rerun if "loss" in r) == 2  # the new run replaced the rest
    (out / "README.md").unlink()
    assert main([*argv, "--max-steps", "2", "--overwrite", *FAST]) == 0
    assert "- `max_steps`: 2" in (out / "README.md").read_text(encoding="utf-8")


def test_cosent_cached_matryoshka_and_mining(data, tmp_path):
    scored = tmp_path / "sts.csv"
    rows = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()][:16]
    with open(scored, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["sentence1", "sentence2", "score"])
        w.writerows([r["anchor"], rows[(i * 3) % 16]["positive"], (i % 5) / 4] for i, r in enumerate(rows))
    out = tmp_path / "cosent"
    assert (
        main(
            [
                "train-embedder",
                "--model",
                MINILM,
                "--train",
                str(scored),
                "--validation",
                str(scored),
                "--loss",
                "cosent",
                "--max-steps",
                "1",
                "--output",
                str(out),
                *FAST,
            ]
        )
        == 0
    )
    assert "eval_spearman" in json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    out = tmp_path / "cached"
    assert (
        main(
            [
                "train-embedder",
                "--model",
                MINILM,
                "--train",
                str(data / "train.jsonl"),
                "--loss",
                "cached-mnrl",
                "--mini-batch-size",
                "3",
                "--matryoshka-dims",
                "384,64",
                "--hard-negatives",
                "1",
                "--mine-from",
                str(data / "corpus.txt"),
                "--max-steps",
                "1",
                "--output",
                str(out),
                *FAST,
            ]
        )
        == 0
    )
    mined = [json.loads(x) for x in (out / "mined-negatives.jsonl").read_text().splitlines()]
    assert mined and all(len(r["negatives"]) == 1 and r["negatives"][0] != r["positive"] for r in mined)


def test_mining_is_chunked_and_skips_false_negatives(data):
    from bertkit.modeling.sentence import load_sentence_encoder
    from bertkit.sentence.embedding_data import mine_hard_negatives

    enc = load_sentence_encoder(MINILM, max_seq_length=48)
    rows = [dict(json.loads(x), negatives=[]) for x in (data / "train.jsonl").read_text().splitlines()][:12]
    corpus = (data / "corpus.txt").read_text().splitlines()[:60]
    # a near copy of a row's positive is a false negative for that row: it must never be its negative
    near = [r["positive"].rstrip(".") + " ." for r in rows]
    big, _ = mine_hard_negatives(enc, rows, corpus + near, 2, progress=False)
    small, _ = mine_hard_negatives(enc, rows, corpus + near, 2, query_block=5, corpus_chunk=7, progress=False)
    assert big == small and len(big) == len(rows)
    assert all(near[i] not in r["negatives"] for i, r in enumerate(big))
    a = enc.encode([r["anchor"] for r in big]).numpy()
    p = enc.encode([r["positive"] for r in big]).numpy()
    n = enc.encode([r["negatives"][0] for r in big]).numpy()
    assert ((a * n).sum(1) <= (a * p).sum(1) - 0.05 + 1e-4).all()
    # a search index built with the same model serves its stored vectors instead of embedding the corpus
    from bertkit.search.index import build_index, load_index

    (data / "pool.txt").write_text("\n".join(corpus + near) + "\n")
    index = load_index(build_index(MINILM, data / "pool.txt", data / "pool-index", dtype="fp32", progress=False))
    enc256 = load_sentence_encoder(MINILM)
    by_text, _ = mine_hard_negatives(enc256, rows, corpus + near, 2, progress=False)
    by_index, _ = mine_hard_negatives(enc256, rows, index.texts, 2, progress=False, corpus_vectors=index.vectors)
    assert sum(a == b for a, b in zip(by_text, by_index)) >= 0.9 * len(rows)  # float16 rounding may swap a tie
    # the first mined negative is the best-scoring allowed text (brute force; the miner keeps float16
    # vectors, so near ties may swap)
    pool = corpus + near
    c = enc.encode(pool).numpy()
    for i, r in enumerate(big):
        ok = [c[j] @ a[i] for j in range(len(pool)) if (a[i] @ c[j]) <= (a[i] @ p[i]) - 0.05]
        assert a[i] @ n[i] >= max(ok) - 2e-3


def test_a_row_whose_positive_ranks_low_still_gets_a_negative_from_below_it():
    """Where more than k + 10 corpus texts score above a row's positive (here, rewordings of its
    anchor: probable false negatives, all skipped), the miner searches further down and takes the best
    text below the margin instead of dropping the row: the hard rows are the ones training needs."""
    from bertkit.modeling.sentence import load_sentence_encoder
    from bertkit.sentence.embedding_data import mine_hard_negatives

    enc = load_sentence_encoder(MINILM, max_seq_length=48)
    row = {
        "anchor": "The central bank raised interest rates by half a point on Tuesday.",
        "positive": "Borrowing costs climb as policymakers act against stubborn inflation.",
        "negatives": [],
    }
    days = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
    near = [f"The central bank raised interest rates by {s} on {d}." for d in days for s in ("a quarter point", "1%")]
    far = [
        "The striker scored twice in the second half.",
        "Add two cups of flour and stir until smooth.",
        "Shares of the carmaker fell after weak quarterly sales.",
        "The museum reopens next spring after renovation.",
    ]
    a, p = enc.encode([row["anchor"], row["positive"]]).numpy()
    c = enc.encode(near + far).numpy()
    limit = float(a @ p) - 0.05
    assert sum(float(a @ v) > limit for v in c) >= 1 + 10  # the old search depth (k + 10) held nothing usable
    mined, dropped = mine_hard_negatives(enc, [row], near + far, 1, progress=False)
    assert dropped == 0 and len(mined) == 1
    negative = mined[0]["negatives"][0]
    assert negative in far
    scores = {t: float(a @ v) for t, v in zip(near + far, c)}
    assert scores[negative] <= limit + 1e-3  # float16 vectors in the miner
    assert scores[negative] >= max(v for v in scores.values() if v <= limit) - 2e-3  # the best one below


def test_bad_input_gets_one_line(data, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"anchor": "a", "positive": "b"}\n\n{"anchor": "c", "postive": "d"}\n')
    assert main(["train-embedder", "--model", MINILM, "--train", str(bad), "--output", str(tmp_path / "o")]) == 1
    assert f"{bad}:3: no text in column 'positive'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    sts = tmp_path / "sts.csv"
    sts.write_text("sentence1,sentence2,score\nx,y,0.5\nu,v,4.2\n")
    assert (
        main(
            [
                "train-embedder",
                "--model",
                MINILM,
                "--train",
                str(sts),
                "--loss",
                "cosent",
                "--output",
                str(tmp_path / "o"),
            ]
        )
        == 1
    )
    assert f"{sts}:3: score 4.2 is outside [0, 1]" in capsys.readouterr().err
    assert main(["train-embedder", "--model", MINILM, "--train", str(sts), "--output", MINILM]) == 1
    assert "is the input model folder" in capsys.readouterr().err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    assert main(["train-embedder", "--model", MINILM, "--train", str(data / "train.jsonl"), "--output", str(busy)]) == 1
    assert "not empty" in capsys.readouterr().err and (busy / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("command", ["train-embedder", "train-reranker"])
def test_output_follows_the_training_folder_rule(command, data, tmp_path, capsys):
    """--resume of another run names each difference (a setting, the data), the output may not lie
    inside the start model, and --overwrite replaces only the command's own earlier output."""
    train = tmp_path / "train.jsonl"
    rows = [json.loads(x) for x in (data / "train.jsonl").read_text().splitlines()][:8]
    if command == "train-reranker":
        rows = [{"query": r["anchor"], "passage": r["positive"], "label": i % 2} for i, r in enumerate(rows)]
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    base = [command, "--model", MINILM, "--train", str(train), "--output", str(out), *FAST, "--max-steps", "1"]
    assert main([*base, "--save-every", "1"]) == 0
    marker = json.loads((out / ".bertkit-output.json").read_text())
    assert marker["command"] == command
    capsys.readouterr()
    assert main([*base, "--save-every", "1", "--resume", "--lr", "1e-4"]) == 1
    assert re.search(r"lr: was 2e-05, now 0\.0001", capsys.readouterr().err)
    train.write_text(train.read_text().replace(rows[0].get("anchor", rows[0].get("query")), "changed text", 1))
    assert main([*base, "--save-every", "1", "--resume"]) == 1
    assert "data" in capsys.readouterr().err
    assert main([*base, "--save-every", "1"]) == 1  # the earlier run is not replaced silently
    assert "--overwrite" in capsys.readouterr().err
    assert main([*base, "--overwrite"]) == 0
    inside = [command, "--model", MINILM, "--train", str(train), "--output", f"{MINILM}/sub", *FAST]
    assert main(inside) == 1
    assert "inside the input model folder" in capsys.readouterr().err
