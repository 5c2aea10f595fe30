"""One contract, every registered model family: what a family must do to be part of bertkit.

For each family (one ``FAMILIES`` entry; a new family is one more entry) and each task class the
registry gives it:

* parity with transformers on random weights, both load directions: transformers' random init saved
  and loaded by bertkit, and bertkit's random init saved and loaded by transformers (no missing or
  unexpected keys), outputs within ``TOL``;
* a save/load round trip that keeps every tensor and output exactly;
* the same input errors, with messages naming the value and the limit, and the same ``check_inputs``
  switch;
* resizing the vocabulary keeps the old logits and saves a folder transformers loads;
* the pipelines of the family's kind answer as transformers' do on the same folder.

Texts are real polarity reviews, tokenized with the real MiniLM WordPiece vocabulary. Floats are
compared in fp32 with ``TOL`` = 1e-5 absolute (both sides run fp32 kernels that sum in different
orders; the differences seen are ~1e-6).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from bertkit.assets import asset_path
from bertkit.modeling import registry
from bertkit.modeling.auto import AutoConfig, AutoModel, AutoTokenizer, auto_class_for_task
from bertkit.tokenization import BertTokenizer

TOL = 1e-5
MAX_POSITIONS = 64


@dataclass(frozen=True)
class Contract:
    """How to build a small transformers config of the family (the only family-specific part)."""

    model_type: str
    hf_config: Any  # (**overrides) -> transformers config


FAMILIES = {
    "bert": Contract(
        "bert",
        lambda **kw: transformers.BertConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=MAX_POSITIONS,
            **kw,
        ),
    ),
    "distilbert": Contract(
        "distilbert",
        lambda **kw: transformers.DistilBertConfig(
            dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=MAX_POSITIONS, **kw
        ),
    ),
    "gpt2": Contract(
        "gpt2",
        lambda **kw: transformers.GPT2Config(
            n_embd=64,
            n_layer=2,
            n_head=4,
            n_positions=MAX_POSITIONS,
            bos_token_id=101,
            eos_token_id=102,
            tokenizer_class="BertTokenizer",
            **kw,
        ),
    ),
    # embedding_size < hidden_size: the embeddings_project layout (ELECTRA-Small's)
    "electra": Contract(
        "electra",
        lambda **kw: transformers.ElectraConfig(
            embedding_size=32,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=MAX_POSITIONS,
            **kw,
        ),
    ),
    # RoBERTa's positions start after padding_idx: with WordPiece's [PAD] = 0 as padding, the table
    # needs MAX_POSITIONS + 1 rows for MAX_POSITIONS tokens. One token type.
    "roberta": Contract(
        "roberta",
        lambda **kw: transformers.RobertaConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=MAX_POSITIONS + 1,
            pad_token_id=0,
            bos_token_id=101,
            eos_token_id=102,
            **kw,
        ),
    ),
    "xlm-roberta": Contract(
        "xlm-roberta",
        lambda **kw: transformers.XLMRobertaConfig(
            hidden_size=48,
            num_hidden_layers=2,
            num_attention_heads=3,
            intermediate_size=96,
            max_position_embeddings=MAX_POSITIONS + 1,
            pad_token_id=0,
            bos_token_id=101,
            eos_token_id=102,
            **kw,
        ),
    ),
    # A window of 8 tokens (4 each side) on 40-token texts, so local layers see part of each text;
    # global attention every second layer. ModernBERT's own byte-level BPE tokenizer is not needed here:
    # the contract feeds every family the same WordPiece ids.
    "modernbert": Contract(
        "modernbert",
        lambda **kw: transformers.ModernBertConfig(
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            intermediate_size=96,
            max_position_embeddings=MAX_POSITIONS,
            local_attention=8,
            global_attn_every_n_layers=2,
            pad_token_id=0,
            bos_token_id=101,
            eos_token_id=102,
            cls_token_id=101,
            sep_token_id=102,
            **kw,
        ),
    ),
}


def _task_classes() -> list[tuple[str, str]]:
    """(model_type, task) for every distinct class the registry gives each family under test."""
    out = []
    for model_type in FAMILIES:
        fam = registry.family(model_type)
        seen = set()
        for task in registry.MODEL_TASKS:
            name = fam.class_name(task)
            if name is not None and name not in seen:
                seen.add(name)
                out.append((model_type, task))
    return out


TASK_CLASSES = _task_classes()


def _reference_broken(model_type: str, task: str) -> str | None:
    """Why transformers' own class cannot be the reference here (None: it can). Probed, not assumed:
    transformers 5's XLMRobertaForMultipleChoice builds its encoder without the pooler it then reads
    (its forward fails with an IndexError); checkpoints of it carry ``roberta.pooler``, as bertkit's does."""
    if (model_type, task) == ("xlm-roberta", "multiple-choice"):
        tiny = transformers.XLMRobertaConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, vocab_size=10)
        if not any("pooler" in k for k in transformers.XLMRobertaForMultipleChoice(tiny).state_dict()):
            return "transformers' XLMRobertaForMultipleChoice has no pooler and fails its own forward"
    return None


# ---------------------------------------------------------------------------------------- set-up


def _polarity(n: int) -> list[str]:
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        return [r["text"] for r in csv.DictReader(f)][:n]


@pytest.fixture(scope="module")
def tokenizer() -> BertTokenizer:
    return BertTokenizer.from_pretrained(asset_path("minilm"))


@pytest.fixture(scope="module")
def batch(tokenizer) -> dict[str, torch.Tensor]:
    enc = tokenizer(_polarity(4), padding=True, truncation=True, max_length=40, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any(), "the batch must contain padding"
    return dict(enc)


def _config(model_type: str, task: str, vocab_size: int, **kw: Any) -> Any:
    labels = {"num_labels": 2 if task == "question-answering" else 3}
    return FAMILIES[model_type].hf_config(vocab_size=vocab_size, **labels, **kw)


def _inputs(model_type: str, task: str, batch: dict) -> dict[str, torch.Tensor]:
    keys = ["input_ids", "attention_mask"] + (["token_type_ids"] if registry.family(model_type).has_token_types else [])
    inputs = {k: batch[k] for k in keys}
    if task == "multiple-choice":  # (B, C, N): the batch's sentences as two questions of two choices
        inputs = {k: v.reshape(2, 2, -1) for k, v in inputs.items()}
    return inputs


def _compare(ours: Any, theirs: Any, mask: torch.Tensor) -> None:
    """Every tensor output transformers gives within TOL; per-token outputs on real tokens only
    (bertkit's packed path leaves padding positions at zero instead of computing them)."""
    real = mask.bool()
    keys = [k for k in theirs.keys() if k not in ("past_key_values", "cache", "loss")]  # a cache is not an output
    assert keys
    for key in keys:
        a, b = ours[key], theirs[key]
        pairs = zip(a, b) if isinstance(b, tuple) else [(a, b)]
        for x, y in pairs:
            assert x.shape == y.shape, key
            if y.dim() >= 2 and tuple(y.shape[:2]) == tuple(real.shape):
                x, y = x[real], y[real]
            assert (x - y).abs().max().item() < TOL, (key, (x - y).abs().max().item())


def _run(model: Any, inputs: dict) -> Any:
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True)


# ---------------------------------------------------------------------------------------- parity


@pytest.mark.parametrize("model_type,task", TASK_CLASSES, ids=[f"{m}-{t}" for m, t in TASK_CLASSES])
def test_transformers_weights_load_into_bertkit_and_back(model_type, task, batch, tmp_path):
    if _reference_broken(model_type, task):
        pytest.skip(_reference_broken(model_type, task))
    fam = registry.family(model_type)
    name = fam.class_name(task)
    torch.manual_seed(0)
    hf = getattr(transformers, name)(_config(model_type, task, 30522)).eval()
    hf.save_pretrained(tmp_path / "hf")
    ours = auto_class_for_task(task).from_pretrained(tmp_path / "hf")
    assert type(ours).__name__ == name and not ours.training
    inputs = _inputs(model_type, task, batch)
    _compare(_run(ours, inputs), _run(hf, inputs), inputs["attention_mask"])
    ours.save_pretrained(tmp_path / "bk")
    back = getattr(transformers, name).from_pretrained(tmp_path / "bk").eval()
    _compare(_run(ours, inputs), _run(back, inputs), inputs["attention_mask"])


@pytest.mark.parametrize("model_type,task", TASK_CLASSES, ids=[f"{m}-{t}" for m, t in TASK_CLASSES])
def test_bertkit_weights_load_into_transformers_and_round_trip(model_type, task, batch, tmp_path):
    if _reference_broken(model_type, task):
        pytest.skip(_reference_broken(model_type, task))
    fam = registry.family(model_type)
    config = fam.config_class().from_dict(_config(model_type, task, 30522).to_dict())
    torch.manual_seed(1)
    ours = fam.model_class(task)(config).eval()
    ours.save_pretrained(tmp_path)
    hf, info = getattr(transformers, fam.class_name(task)).from_pretrained(str(tmp_path), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    inputs = _inputs(model_type, task, batch)
    mine = _run(ours, inputs)
    _compare(mine, _run(hf.eval(), inputs), inputs["attention_mask"])
    again = auto_class_for_task(task).from_pretrained(tmp_path)  # the round trip is exact
    saved = {k: v for k, v in again.config.to_dict().items() if k != "architectures"}  # written on save
    assert type(again) is type(ours) and saved == ours.config.to_dict()
    assert again.config.architectures == [type(ours).__name__]
    theirs = again.state_dict()
    assert set(theirs) == set(ours.state_dict())
    assert all(torch.equal(v, theirs[k]) for k, v in ours.state_dict().items())
    out = _run(again, inputs)
    for key in mine.keys():
        if torch.is_tensor(mine[key]):
            assert torch.equal(mine[key], out[key]), key


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_pytorch_bin_saves_load_in_transformers_and_back(model_type, batch, tmp_path):
    """``save_pretrained(safe_serialization=False)`` writes pytorch_model.bin (tied weights once, as
    transformers writes it), which transformers loads to the same outputs; a transformers model's
    pickled state dict loads into bertkit; a sharded .bin save has transformers' names and index."""
    fam = registry.family(model_type)
    task = "causal-lm" if model_type == "gpt2" else "pretraining"  # the heads with tied embeddings
    name = fam.class_name(task)
    config = fam.config_class().from_dict(_config(model_type, task, 30522).to_dict())
    torch.manual_seed(2)
    ours = fam.model_class(task)(config).eval()
    ours.save_pretrained(tmp_path / "bk", safe_serialization=False)
    assert sorted(p.name for p in (tmp_path / "bk").iterdir()) == ["config.json", "pytorch_model.bin"]
    saved = torch.load(tmp_path / "bk" / "pytorch_model.bin", weights_only=True)
    hf, info = getattr(transformers, name).from_pretrained(str(tmp_path / "bk"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    tied = set(getattr(hf, "_tied_weights_keys", None) or {})
    assert set(saved) == set(hf.state_dict()) - tied  # tied copies are written once
    inputs = _inputs(model_type, "base", batch)
    _compare(_run(ours, inputs), _run(hf.eval(), inputs), inputs["attention_mask"])

    torch.manual_seed(3)
    theirs = getattr(transformers, name)(_config(model_type, task, 30522)).eval()
    theirs.config.save_pretrained(tmp_path / "hf")
    torch.save(theirs.state_dict(), tmp_path / "hf" / "pytorch_model.bin")
    back = auto_class_for_task(task).from_pretrained(tmp_path / "hf")
    _compare(_run(back, inputs), _run(theirs, inputs), inputs["attention_mask"])

    back.save_pretrained(tmp_path / "bk", safe_serialization=False, max_shard_size="2MB")
    names = sorted(p.name for p in (tmp_path / "bk").iterdir())
    shards = [n for n in names if n.startswith("pytorch_model-")]
    assert len(shards) > 1 and names == sorted(["config.json", "pytorch_model.bin.index.json", *shards])
    sharded = getattr(transformers, name).from_pretrained(str(tmp_path / "bk")).eval()
    _compare(_run(back, inputs), _run(sharded, inputs), inputs["attention_mask"])
    back.save_pretrained(tmp_path / "bk")  # back to safetensors: the .bin files would shadow nothing stale
    assert sorted(p.name for p in (tmp_path / "bk").iterdir()) == ["config.json", "model.safetensors"]
    with pytest.raises(TypeError, match="safe_serialization must be True or False, got 'no'"):
        back.save_pretrained(tmp_path / "never", safe_serialization="no")
    assert not (tmp_path / "never").exists()


# ---------------------------------------------------------------------------------------- input errors


@pytest.mark.parametrize("model_type", FAMILIES)
def test_same_input_errors_and_check_inputs_switch(model_type):
    fam = registry.family(model_type)
    config = fam.config_class().from_dict(_config(model_type, "base", 1000).to_dict())
    model = fam.model_class("base")(config).eval()
    lm = fam.model_class("pretraining")(config).eval()
    field = model.positions_field
    ids = torch.ones(2, 5, dtype=torch.long)
    for m in (model, lm):
        with pytest.raises(ValueError, match=r"input_ids contains 1000.*vocab_size=1000"):
            m(torch.tensor([[1, 2, 1000]]))
        with pytest.raises(ValueError, match=r"input_ids contains -1"):
            m(torch.tensor([[1, -1, 3]]))
        with pytest.raises(TypeError, match="integer"):
            m(torch.tensor([[1.0, 2.0]]))
        with pytest.raises(TypeError, match="torch.Tensor"):
            m([[1, 2, 3]])
        with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 4\).*\(2, 5\)"):
            m(ids, attention_mask=torch.ones(2, 4))
        with pytest.raises(ValueError, match=r"token_type_ids has shape \(1, 5\).*\(2, 5\)"):
            m(ids, token_type_ids=torch.zeros(1, 5, dtype=torch.long))
        with pytest.raises(ValueError, match=rf"sequence length {MAX_POSITIONS + 1} exceeds {field}={MAX_POSITIONS}"):
            m(torch.ones(1, MAX_POSITIONS + 1, dtype=torch.long))
        with pytest.raises(ValueError, match=r"\(5,\).*unsqueeze"):
            m(torch.ones(5, dtype=torch.long))
        with pytest.raises(ValueError, match="empty"):
            m(torch.ones(1, 0, dtype=torch.long))
        with pytest.raises(ValueError, match="exactly one"):
            m()
    with torch.no_grad():
        model(torch.ones(1, MAX_POSITIONS, dtype=torch.long))  # the limit itself is fine
    model.check_inputs = False  # a trusted caller skips the host read of the ids, not the shape checks
    with pytest.raises(IndexError):
        model(torch.tensor([[1, 2, 1000]]))
    with pytest.raises(ValueError, match="shape"):
        model(torch.tensor([1, 2, 3]))


# ---------------------------------------------------------------------------------------- vocabulary


@pytest.mark.parametrize("model_type", FAMILIES)
def test_resize_vocabulary_keeps_old_logits_and_saves_for_transformers(model_type, batch, tmp_path):
    fam = registry.family(model_type)
    task = "causal-lm" if fam.kind == registry.CAUSAL else "masked-lm"
    hf_cls = getattr(transformers, fam.class_name(task))
    torch.manual_seed(2)
    hf = hf_cls(_config(model_type, task, 30522)).eval()
    hf.save_pretrained(tmp_path / "hf")
    ours = auto_class_for_task(task).from_pretrained(tmp_path / "hf")
    n = 30522
    ours.resize_token_embeddings(n + 5)
    assert ours.config.vocab_size == n + 5
    assert ours.get_output_embeddings().weight is ours.get_input_embeddings().weight  # still tied
    inputs = _inputs(model_type, task, batch)
    real = inputs["attention_mask"].bool()
    with torch.no_grad():  # the old vocabulary's logits are transformers' logits of the unresized model
        a, b = hf(**inputs).logits, ours(**inputs).logits
    assert b.shape[-1] == n + 5 and (a[real] - b[real][:, :n]).abs().max() < TOL
    ours.save_pretrained(tmp_path / "bk")
    back = hf_cls.from_pretrained(tmp_path / "bk").eval()
    assert back.config.vocab_size == n + 5
    with torch.no_grad():
        c = back(**inputs).logits
    assert (c[real] - b[real]).abs().max() < TOL
    ours.resize_token_embeddings(n - 22)  # shrinking keeps the first rows
    assert torch.equal(ours.get_input_embeddings().weight, hf.get_input_embeddings().weight[: n - 22])
    with pytest.raises(ValueError, match="new_num_tokens"):
        ours.resize_token_embeddings(0)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_resize_calls_and_counts_answer_as_transformers(model_type, tmp_path):
    """transformers' resize signature (None keeps the size, pad_to_multiple_of rounds it up, new rows
    start at the mean of the old ones) and num_parameters(exclude_embeddings=True)."""
    fam = registry.family(model_type)
    task = "causal-lm" if fam.kind == registry.CAUSAL else "masked-lm"
    torch.manual_seed(2)
    getattr(transformers, fam.class_name(task))(_config(model_type, task, 1000)).save_pretrained(tmp_path)
    hf = getattr(transformers, fam.class_name(task)).from_pretrained(tmp_path)
    ours = auto_class_for_task(task).from_pretrained(tmp_path)
    assert ours.main_input_name == hf.main_input_name
    expected = hf.num_parameters(exclude_embeddings=True)
    if model_type == "xlm-roberta":
        # transformers counts by name, and registers XLM-R's lm_head before the encoder: the tied
        # table is named lm_head.decoder.weight first and counted; bertkit leaves it out under any name.
        expected -= hf.get_output_embeddings().weight.numel()
    assert ours.num_parameters(exclude_embeddings=True) == expected
    for args, kw in [((1003,), {}), ((1003,), {"pad_to_multiple_of": 8}), ((None,), {"pad_to_multiple_of": 64})]:
        a, b = hf.resize_token_embeddings(*args, **kw), ours.resize_token_embeddings(*args, **kw)
        assert a.weight.shape == b.weight.shape, (args, kw)
        # transformers draws new rows from a normal around the old mean with 1e-9 of their covariance
        assert (a.weight - b.weight).abs().max() < 1e-4, (args, kw)
        assert ours.config.vocab_size == hf.config.vocab_size == a.weight.shape[0]
    assert ours.resize_token_embeddings().weight.shape[0] == 1024
    with pytest.raises(ValueError, match="pad_to_multiple_of"):
        ours.resize_token_embeddings(1030, pad_to_multiple_of=0)


# ---------------------------------------------------------------------------------------- pipelines


def _folder(model_type: str, task: str, tokenizer: BertTokenizer, path, **kw: Any):
    """A transformers model of the family saved with the WordPiece tokenizer (spread-out random weights,
    so predictions are not near-ties)."""
    torch.manual_seed(3)
    cfg = _config(model_type, task, len(tokenizer.vocab), initializer_range=0.2, **kw)
    getattr(transformers, registry.family(model_type).class_name(task))(cfg).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("model_type", FAMILIES)
def test_pipelines_answer_as_transformers(model_type, tokenizer, tmp_path):
    from bertkit.pipelines import pipeline

    fam = registry.family(model_type)
    texts = _polarity(3)
    assert (
        type(AutoConfig.from_pretrained(_folder(model_type, "base", tokenizer, tmp_path / "base")))
        is fam.config_class()
    )
    assert type(AutoModel.from_pretrained(tmp_path / "base")) is fam.model_class("base")
    assert type(AutoTokenizer.from_pretrained(tmp_path / "base")) is BertTokenizer
    if fam.kind == registry.CAUSAL:
        folder = _folder(model_type, "causal-lm", tokenizer, tmp_path / "lm")
        hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
        gen = pipeline("text-generation", model=folder)
        for text in texts:
            got = gen(text[:60], max_new_tokens=8, do_sample=False)[0]["generated_text"]
            ids = tokenizer(text[:60], return_tensors="pt")["input_ids"]
            want = hf.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)[0, ids.shape[1] :]
            assert got == text[:60] + tokenizer.decode(want.tolist(), skip_special_tokens=True)
        return
    folder = _folder(model_type, "masked-lm", tokenizer, tmp_path / "mlm")
    ours = pipeline("fill-mask", model=folder)(f"this film is {tokenizer.mask_token}.", top_k=5)
    # the folder's WordPiece files, named for transformers (its ModernBERT default is a tokenizer.json)
    hf_tok = transformers.BertTokenizerFast.from_pretrained(str(folder))
    theirs = transformers.pipeline("fill-mask", model=str(folder), tokenizer=hf_tok)(
        f"this film is {tokenizer.mask_token}.", top_k=5
    )
    assert [x["token"] for x in ours] == [x["token"] for x in theirs]
    torch.testing.assert_close([x["score"] for x in ours], [x["score"] for x in theirs], rtol=1e-4, atol=1e-7)
    labels = {"id2label": {0: "neg", 1: "mid", 2: "pos"}, "label2id": {"neg": 0, "mid": 1, "pos": 2}}
    folder = _folder(model_type, "sequence-classification", tokenizer, tmp_path / "clf", **labels)
    ours = pipeline("text-classification", model=folder)(texts, top_k=None)
    hf = getattr(transformers, fam.class_name("sequence-classification")).from_pretrained(folder).eval()
    enc = transformers.BertTokenizerFast.from_pretrained(str(folder))(texts, padding=True, return_tensors="pt")
    if not fam.has_token_types:
        enc.pop("token_type_ids", None)
    with torch.no_grad():
        probs = hf(**enc).logits.softmax(-1)
    for row, p in zip(ours, probs):
        got = {x["label"]: x["score"] for x in row}
        assert set(got) == {"neg", "mid", "pos"}
        assert max(abs(got[hf.config.id2label[i]] - float(p[i])) for i in range(3)) < TOL


@pytest.mark.parametrize("model_type", [t for t in FAMILIES if registry.family(t).kind == registry.ENCODER])
def test_finetune_and_load_the_family_head(model_type, tokenizer, tmp_path):
    """finetune/evaluate/predict take the head class from the registry: a family's folder fine-tunes
    into that family's classifier (16 real sentences, one step: wiring, not accuracy)."""
    from bertkit.tasks import finetune
    from bertkit.tasks.api import load_finetuned

    fam = registry.family(model_type)
    base = _folder(model_type, "base", tokenizer, tmp_path / "base")
    finetune(
        "text-classification",
        base,
        asset_path("polarity-train"),
        tmp_path / "out",
        epochs=1,
        batch_size=16,
        max_length=32,
        max_train_samples=16,
        progress=False,
        quiet=True,
    )
    task, net, _ = load_finetuned(tmp_path / "out")
    assert task.name == "text-classification" and type(net) is fam.model_class("sequence-classification")


# ---------------------------------------------------------------------------------------- the registry


@pytest.mark.parametrize("model_type", FAMILIES)
def test_registry_entry_resolves_and_every_consumer_reads_it(model_type, tmp_path):
    """Each class the registry names exists, takes the family's config, is found again from its name
    (config.json's architectures), and serve picks the task the registry gives it."""
    from bertkit.serving.app import TASKS, detect_task

    fam = registry.family(model_type)
    for task in fam.models:
        cls = fam.model_class(task)
        assert cls.config_class is fam.config_class() and cls.__name__ == fam.class_name(task)
        assert registry.family_of_architecture(cls.__name__) is fam
        (tmp_path / "config.json").write_text(f'{{"architectures": ["{cls.__name__}"]}}')
        want = fam.pipeline_task(fam.task_of(cls.__name__))
        assert detect_task(tmp_path) == (want if want in TASKS else "sentence-embedding")
    config = fam.config_class().from_dict(_config(model_type, "base", 100).to_dict())
    for task in set(registry.MODEL_TASKS) - set(fam.models):  # a missing head says why, naming the family
        with pytest.raises(ValueError, match=model_type):
            auto_class_for_task(task).from_config(config)
