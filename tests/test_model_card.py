"""The README.md model card ``SentenceTransformer.save`` and ``CrossEncoder.save`` write.

Checked against sentence-transformers 6 on the real MiniLM: the Hub metadata (library, tags, pipeline,
language, license, datasets) and the model facts (sequence length, vector size, similarity) equal the
card sentence-transformers writes for the same model; the usage snippet's similarities are the ones
sentence-transformers prints there (4 decimals, within 2e-4); after training, the model-index and
metric names are the ones sentence-transformers' own card code derives from the same evaluator's
results, the loss's parameters are its ``get_config_dict()``, and the training-log table holds the
losses the Trainer logged. A README.md bertkit did not write is never replaced; a folder's own card
is carried over while the model is untrained.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import warnings

import pytest
import torch

import bertkit
from bertkit import evaluation as bke
from bertkit import losses
from bertkit.assets import asset_path

st = pytest.importorskip("sentence_transformers")
yaml = pytest.importorskip("yaml")

MINILM = str(asset_path("minilm"))


def _header(text: str) -> dict:
    """The YAML metadata between the first two '---' lines."""
    assert text.startswith("---\n"), text[:80]
    return yaml.safe_load(text.split("---\n", 2)[1])


def _fact(text: str, label: str) -> str:
    found = re.search(rf"^- \*\*{re.escape(label)}:\*\* (.+)$", text, re.M)
    assert found, f"no {label} line"
    return found.group(1)


def _printed_matrix(text: str) -> torch.Tensor:
    """The similarity matrix a card's usage snippet prints (its '# tensor([[...' comment lines)."""
    block = re.search(r"# tensor\((\[\[.*?\]\])\)", text, re.S)
    assert block, "no printed similarities"
    return torch.tensor(json.loads(re.sub(r"\s*#\s*", " ", block.group(1))))


@pytest.fixture(scope="module")
def lee():
    with open(asset_path("sts-lee"), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:24]
    return (
        [" ".join(r["sentence1"].split()[:12]) for r in rows],
        [" ".join(r["sentence2"].split()[:12]) for r in rows],
        [float(r["score"]) for r in rows],
    )


def test_untrained_card_says_what_sentence_transformers_card_says(tmp_path):
    card_data = dict(language="en", license="apache-2.0", model_id="someone/minilm-copy")
    ours = bertkit.SentenceTransformer(MINILM, model_card_data=st.SentenceTransformerModelCardData(**card_data))
    ref = st.SentenceTransformer(
        MINILM, device="cpu", model_card_data=st.SentenceTransformerModelCardData(local_files_only=True, **card_data)
    )
    ours.save(tmp_path / "ours")
    ref.save(str(tmp_path / "ref"))
    mine, theirs = (tmp_path / "ours" / "README.md").read_text(), (tmp_path / "ref" / "README.md").read_text()
    got, want = _header(mine), _header(theirs)
    for key in ("library_name", "tags", "pipeline_tag", "language", "license"):
        assert got.get(key) == want.get(key), key
    for label in ("Model Type", "Maximum Sequence Length", "Output Dimensionality", "Similarity Function"):
        assert _fact(mine, label) == _fact(theirs, label), label
    assert torch.allclose(_printed_matrix(mine), _printed_matrix(theirs), atol=2e-4)
    assert 'SentenceTransformer("someone/minilm-copy")' in mine
    # the card sits beside a folder sentence-transformers still loads to the same vectors
    texts = ["A card does not change the vectors.", "It is only a README."]
    a = st.SentenceTransformer(str(tmp_path / "ours"), device="cpu").encode(texts)
    assert torch.allclose(torch.from_numpy(a), torch.from_numpy(ref.encode(texts)), atol=1e-5)


def test_cross_encoder_card_metadata_as_sentence_transformers(tmp_path):
    from sentence_transformers.cross_encoder import CrossEncoder as STCrossEncoder

    from bertkit import CrossEncoder

    ours, ref = CrossEncoder(MINILM, num_labels=1), STCrossEncoder(MINILM, num_labels=1, device="cpu")
    ours.save(tmp_path / "ours")
    ref.save(str(tmp_path / "ref"))
    mine, theirs = (tmp_path / "ours" / "README.md").read_text(), (tmp_path / "ref" / "README.md").read_text()
    got, want = _header(mine), _header(theirs)
    for key in ("library_name", "tags", "pipeline_tag"):
        assert got.get(key) == want.get(key), key
    for label in ("Model Type", "Maximum Sequence Length", "Number of Output Labels"):
        assert _fact(mine, label) == _fact(theirs, label), label
    # the scores the card prints are the saved model's own
    printed = json.loads(re.search(r"print\(scores\)\n# (\[.*?\])\n", mine).group(1))
    pairs = re.findall(r'^    \[("[^"]+"), ("[^"]+")\],$', mine, re.M)
    reloaded = CrossEncoder(tmp_path / "ours").predict([(json.loads(q), json.loads(d)) for q, d in pairs])
    assert torch.allclose(
        torch.tensor(printed, dtype=torch.float64), torch.tensor(reloaded, dtype=torch.float64), atol=1e-4
    )


def test_trained_card_records_the_run(tmp_path, lee):
    from sentence_transformers.sentence_transformer.model_card import SentenceTransformerModelCardData

    s1, s2, gold = lee
    model = bertkit.SentenceTransformer(MINILM)
    evaluator = bke.EmbeddingSimilarityEvaluator(s1[:12], s2[:12], gold[:12], name="lee-dev")
    train = {"anchor": s1[12:], "positive": s2[12:]}
    args = bertkit.SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "run"),
        num_train_epochs=1,
        per_device_train_batch_size=4,
        learning_rate=3e-5,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        report_to="none",
        disable_tqdm=True,
    )
    loss = losses.MultipleNegativesRankingLoss(model, scale=10.0)
    trainer = bertkit.SentenceTransformerTrainer(
        model=model, args=args, train_dataset=train, loss=loss, evaluator=evaluator
    )
    trainer.train()
    model.save(tmp_path / "out")
    text = (tmp_path / "out" / "README.md").read_text()
    head = _header(text)
    for tag in ("generated_from_trainer", "dataset_size:12", "loss:MultipleNegativesRankingLoss"):
        assert tag in head["tags"]

    # sentence-transformers' own card code, given the same evaluator and its last results
    ref = SentenceTransformerModelCardData()
    ref.model_name = "SentenceTransformer"
    ref.eval_results_dict = {evaluator: model.model_card_data.eval_results_dict[evaluator]}
    want = ref.format_eval_metrics()
    assert head["metrics"] == want["metrics"]
    assert head["model-index"] == want["model-index"]

    config = re.search(r"`MultipleNegativesRankingLoss` with these parameters:\n  ```json\n(.*?)\n  ```", text, re.S)
    assert json.loads(config.group(1)) == json.loads(json.dumps(loss.get_config_dict()))
    assert json.loads(config.group(1))["scale"] == 10.0
    assert "- `learning_rate`: 3e-05" in text and "- `per_device_train_batch_size`: 4" in text
    assert f"#### MultipleNegativesRankingLoss\n\n```bibtex\n{loss.citation.strip()}\n```" in text

    # the training data's statistics and samples, as sentence-transformers' card code computes them
    from sentence_transformers import SentenceTransformer as TheirModel

    class Rows:  # a datasets.Dataset as that code reads one: a row by index, columns by slice
        def __len__(self):
            return len(train["anchor"])

        def __getitem__(self, i):
            return {k: v[i] for k, v in train.items()}

    theirs = TheirModel(str(tmp_path / "out"), device="cpu").model_card_data
    details = next(line for line in text.splitlines() if line.startswith("  | details |"))
    for column in train:
        stats = theirs._compute_column_stats(Rows(), column)
        assert "<ul><li>" + "</li><li>".join(f"{k}: {v}" for k, v in stats["data"].items()) + "</li></ul>" in details
    assert "* Approximate statistics based on the first 12 samples:" in text
    assert f"| <code>{train['anchor'][0]}</code> | <code>{train['positive'][0]}</code> |" in text

    logged = {row["step"]: row["loss"] for row in trainer.state.log_history if "loss" in row}
    table = text.split("### Training Logs", 1)[1]
    rows = re.findall(r"^\| ([\d.]+) \| (\d+) \| ([\d.]+) \| ([\d.-]+) \|$", table, re.M)
    assert [int(r[1]) for r in rows] == sorted(logged) == [1, 2, 3]
    for _, step, value, _ in rows:
        assert abs(float(value) - logged[int(step)]) <= 6e-5
    scored = [r for r in rows if r[3] != "-"]
    assert [int(r[1]) for r in scored] == [2]  # the evaluator's primary metric, at its step

    # the trainer's own call, as in sentence-transformers' training scripts: the card in output_dir
    trainer.create_model_card(language="en", license="mit", tags="lee-demo", model_name="MiniLM on Lee")
    card = (tmp_path / "run" / "README.md").read_text()
    head = _header(card)
    assert (head["language"], head["license"]) == (["en"], "mit") and "lee-demo" in head["tags"]
    assert "\n# MiniLM on Lee\n" in card and head["model-index"][0]["name"] == "MiniLM on Lee"


def test_fit_records_the_run_too(tmp_path, lee):
    from bertkit import InputExample

    s1, s2, _ = lee
    model = bertkit.SentenceTransformer(MINILM)
    data = [InputExample(texts=[a, b]) for a, b in zip(s1, s2)]
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
    model.fit([(loader, losses.MultipleNegativesRankingLoss(model))], epochs=1, warmup_steps=1, show_progress_bar=False)
    model.save(tmp_path / "out")
    text = (tmp_path / "out" / "README.md").read_text()
    assert "dataset_size:24" in _header(text)["tags"]
    assert "- `warmup_steps`: 1" in text
    assert len(re.findall(r"^\| [\d.]+ \| \d+ \| [\d.]+ \|$", text.split("### Training Logs", 1)[1], re.M)) == 3


def test_a_readme_bertkit_did_not_write_is_kept(tmp_path):
    model = bertkit.SentenceTransformer(MINILM)
    target = tmp_path / "out"
    target.mkdir()
    (target / "README.md").write_text("# my own notes\n")
    with pytest.warns(UserWarning, match=r"README.md was not written by bertkit: it is kept"):
        model.save(target)
    assert (target / "README.md").read_text() == "# my own notes\n"
    assert (target / "model.safetensors").is_file()
    # a card bertkit wrote is its to replace; without create_model_card none is touched
    other = tmp_path / "other"
    model.save(other)
    first = (other / "README.md").read_text()
    model.model_card_data.license = "mit"
    model.save(other)
    assert _header((other / "README.md").read_text())["license"] == "mit" != _header(first).get("license")
    # a card bertkit wrote and someone edited since is theirs: kept, with a warning that says so
    card = (other / "README.md").read_text()
    assert card.count("written again on each save unless edited (digest ") == 1
    (other / "README.md").write_text(card.replace("## Model Details", "## Model Details\n\nOur notes.", 1))
    model.model_card_data.license = "apache-2.0"
    with pytest.warns(UserWarning, match=r"README.md was edited since bertkit wrote it: it is kept"):
        model.save(other)
    assert "Our notes." in (other / "README.md").read_text()
    with warnings.catch_warnings():  # the same card met again: said once a process, still kept
        warnings.simplefilter("error")
        model.save(other)
    assert "Our notes." in (other / "README.md").read_text()
    (other / "README.md").write_text("edited by hand\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.save(other, create_model_card=False)
    assert (other / "README.md").read_text() == "edited by hand\n"


def test_a_folders_own_card_is_carried_over_while_untrained(tmp_path):
    folder = tmp_path / "with-card"
    shutil.copytree(MINILM, folder)
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# The authors' card\n")
    model = bertkit.SentenceTransformer(folder)
    model.save(tmp_path / "copy")
    assert (tmp_path / "copy" / "README.md").read_text() == (folder / "README.md").read_text()
    model.save(folder, overwrite=True)  # saved in place (asked for): its own card is the one it came with
    assert (folder / "README.md").read_text().endswith("# The authors' card\n")


def test_base_model_from_the_hub_cache_layout(tmp_path):
    snapshot = tmp_path / "hub" / "models--someone--tiny-minilm" / "snapshots" / "0123abc"
    shutil.copytree(MINILM, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abc")
    model = bertkit.SentenceTransformer("someone/tiny-minilm", cache_folder=tmp_path / "hub")
    model.save(tmp_path / "out")
    text = (tmp_path / "out" / "README.md").read_text()
    assert _header(text)["base_model"] == "someone/tiny-minilm"
    assert "\n# SentenceTransformer based on someone/tiny-minilm\n" in text
    assert "finetuned from [someone/tiny-minilm](https://huggingface.co/someone/tiny-minilm)" in text


def test_named_datasets_reach_the_metadata_and_the_description(tmp_path):
    """Dataset ids the caller gives are listed as given (bertkit cannot check them on the Hub)."""
    data = bertkit.SentenceTransformerModelCardData(
        train_datasets=[{"name": "Lee", "id": "someone/lee"}], eval_datasets=[{"name": "STS dev"}]
    )
    bertkit.SentenceTransformer(MINILM, model_card_data=data).save(tmp_path / "out")
    text = (tmp_path / "out" / "README.md").read_text()
    assert _header(text)["datasets"] == ["someone/lee"]
    assert _fact(text, "Training Dataset") == "Lee"


def test_a_card_that_cannot_be_written_does_not_stop_the_save(tmp_path, lee):
    """A user's loss whose settings cannot be read: the card is skipped with a warning naming the
    error, and the folder is saved and loads to the same vectors."""

    class MyLoss(losses.MultipleNegativesRankingLoss):
        def get_config_dict(self):
            raise RuntimeError("settings unavailable")

    model = bertkit.SentenceTransformer(MINILM)
    s1, s2, _ = lee
    args = bertkit.SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=1, per_device_train_batch_size=4, report_to="none"
    )
    bertkit.SentenceTransformerTrainer(
        model=model, args=args, train_dataset={"anchor": s1[:4], "positive": s2[:4]}, loss=MyLoss(model)
    ).train()
    with pytest.warns(UserWarning, match=r"no model card written .*RuntimeError: settings unavailable"):
        model.save(tmp_path / "out")
    assert not (tmp_path / "out" / "README.md").exists()
    texts = ["saved all the same"]
    back = bertkit.SentenceTransformer(tmp_path / "out").encode(texts)
    assert torch.allclose(torch.from_numpy(back), torch.from_numpy(model.encode(texts)), atol=1e-5)


def test_bad_model_card_data_is_refused_by_name():
    with pytest.raises(TypeError, match=r"model_card_data must be a SentenceTransformerModelCardData, got int"):
        bertkit.SentenceTransformer(MINILM, model_card_data=3)
