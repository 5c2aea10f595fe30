"""DistilBERT and GPT-2 details beyond the family contract (test_family_contract.py): attentions, the KV
cache, generation against transformers, Auto-class errors and tokenizer_class.

Every comparison goes both ways: a transformers save loaded by bertkit, and a bertkit save loaded by
transformers. Sentences are real polarity reviews and Chinese news.
"""

from __future__ import annotations

import csv
import itertools

import pytest
import torch
import transformers

import bertkit
from bertkit.assets import asset_path
from bertkit.modeling import distilbert as D
from bertkit.modeling.gpt2 import GPT2LMHeadModel, GPT2Model
from bertkit.tokenization import BertTokenizer

TOL = 1e-5


def _polarity(n: int) -> list[str]:
    with open(asset_path("polarity-test"), newline="", encoding="utf-8") as f:
        rows = [r for r in csv.reader(f) if len(r) >= 2]
    texts = [r[1] for r in rows if r[1] and r[0] != "label"]
    return texts[:n]


def _news(n: int) -> list[str]:
    with open(asset_path("news-zh"), encoding="utf-8") as f:
        return [line.strip() for line in itertools.islice(f, 200) if line.strip()][:n]


@pytest.fixture(scope="module")
def en_batch():
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    return tok(_polarity(4), padding=True, truncation=True, max_length=64, return_tensors="pt")


@pytest.fixture(scope="module")
def zh_tokenizer():
    return BertTokenizer(str(asset_path("vocab-chinese")))


# ---------------------------------------------------------------------------------------- DistilBERT


def test_distilbert_hidden_states_and_attentions_match(en_batch, tmp_path):
    torch.manual_seed(1)
    ref = transformers.DistilBertModel(
        transformers.DistilBertConfig(n_layers=2, dim=64, n_heads=4, hidden_dim=128)
    ).eval()
    ref.save_pretrained(tmp_path)
    ours = D.DistilBertModel.from_pretrained(tmp_path)
    kw = {
        "input_ids": en_batch["input_ids"],
        "attention_mask": en_batch["attention_mask"],
        "output_hidden_states": True,
        "output_attentions": True,
    }
    with torch.no_grad():
        a, b = ref(**kw), ours(**kw)
    real = en_batch["attention_mask"].bool()
    for x, y in zip(a.hidden_states, b.hidden_states):
        assert torch.allclose(x[real], y[real], atol=TOL)
    for x, y in zip(a.attentions, b.attentions):
        assert torch.allclose(x, y, atol=TOL)


@pytest.mark.parametrize("cls", ["DistilBertModel", "DistilBertForSequenceClassification", "DistilBertForMaskedLM"])
def test_distilbert_position_ids_as_transformers_reads_them(en_batch, tmp_path, cls):
    """transformers' DistilBERT takes position_ids (shifted positions, one row for the batch or one
    per row); they were a TypeError in bertkit."""
    torch.manual_seed(2)
    ref = getattr(transformers, cls)(transformers.DistilBertConfig(n_layers=2, dim=64, n_heads=4, hidden_dim=128))
    ref.eval().save_pretrained(tmp_path)
    ours = getattr(D, cls).from_pretrained(tmp_path).eval()
    ids, mask = en_batch["input_ids"], en_batch["attention_mask"]
    n = ids.shape[1]
    real = mask.bool()
    for positions in (torch.arange(5, 5 + n)[None], torch.stack([torch.arange(i, i + n) for i in range(ids.shape[0])])):
        with torch.no_grad():
            a = ref(input_ids=ids, attention_mask=mask, position_ids=positions)
            b = ours(input_ids=ids, attention_mask=mask, position_ids=positions)
            plain = ours(input_ids=ids, attention_mask=mask)
        x, y = a[0], b[0]
        if x.dim() == 3:
            x, y = x[real], y[real]
        torch.testing.assert_close(y, x, atol=TOL, rtol=1e-4)
        assert not torch.allclose(b[0], plain[0], atol=1e-3)  # the positions were used
    with pytest.raises(ValueError, match="position_ids has shape"):
        ours(input_ids=ids, position_ids=torch.arange(n + 1)[None])


# ---------------------------------------------------------------------------------------- GPT-2


@pytest.fixture(scope="module")
def gpt2_pair(tmp_path_factory):
    """A transformers GPT-2 (random init, the bert-base-chinese vocabulary) and bertkit's load of its save."""
    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=4,
        vocab_size=21128,
        n_positions=96,
        bos_token_id=101,
        eos_token_id=102,
        pad_token_id=0,
    )
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    ref.save_pretrained(folder)
    return ref, GPT2LMHeadModel.from_pretrained(folder), folder


@pytest.fixture(scope="module")
def zh_batch(zh_tokenizer):
    # Left padding, as generation needs; real sentences of different lengths.
    enc = zh_tokenizer(_news(3), padding=True, truncation=True, max_length=40, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    lengths = mask.sum(1)
    left_ids, left_mask = torch.zeros_like(ids), torch.zeros_like(mask)
    for i, n in enumerate(lengths.tolist()):
        left_ids[i, ids.shape[1] - n :] = ids[i, :n]
        left_mask[i, ids.shape[1] - n :] = 1
    return ids, mask, left_ids, left_mask


def test_gpt2_state_dict_keys_and_conv1d_layout(gpt2_pair):
    ref, ours, _ = gpt2_pair
    ref_sd, our_sd = ref.state_dict(), ours.state_dict()
    assert set(our_sd) == set(ref_sd)
    for k, v in ref_sd.items():
        assert our_sd[k].shape == v.shape, k  # Conv1D weights stay (in, out)
    assert ours.lm_head.weight.data_ptr() == ours.transformer.wte.weight.data_ptr()  # tied


def test_gpt2_kv_cache_matches_full_forward(gpt2_pair, zh_batch):
    _, ours, _ = gpt2_pair
    ids = zh_batch[0][:1, :20]
    with torch.no_grad():
        full = ours(input_ids=ids).logits
        first = ours(input_ids=ids[:, :12], use_cache=True)
        rest = ours(input_ids=ids[:, 12:], past_key_values=first.past_key_values, use_cache=True)
    assert torch.allclose(torch.cat([first.logits, rest.logits], 1), full, atol=TOL)


@pytest.mark.parametrize("mode", ["no_mask", "mask", "left_padding"])
def test_gpt2_greedy_generate_equals_transformers(gpt2_pair, zh_batch, mode):
    ref, ours, _ = gpt2_pair
    ids, _, left_ids, left_mask = zh_batch
    if mode == "no_mask":
        kw = {"input_ids": ids[:1, :10]}
    elif mode == "mask":
        kw = {"input_ids": ids[:1, :10], "attention_mask": torch.ones_like(ids[:1, :10])}
    else:
        kw = {"input_ids": left_ids, "attention_mask": left_mask}
    expected = ref.generate(**kw, max_new_tokens=40, do_sample=False)
    got = ours.generate(**kw, max_new_tokens=40)
    assert got.shape == expected.shape
    assert torch.equal(got, expected)


def test_gpt2_generate_penalties_and_no_cache_equal_transformers(gpt2_pair, zh_batch):
    ref, ours, _ = gpt2_pair
    ids = zh_batch[0][:1, :10]
    kw = {"max_new_tokens": 30, "repetition_penalty": 1.3, "no_repeat_ngram_size": 2}
    assert torch.equal(ours.generate(ids, **kw), ref.generate(ids, do_sample=False, **kw))
    assert torch.equal(
        ours.generate(ids, max_length=30, use_cache=False), ref.generate(ids, max_length=30, do_sample=False)
    )


def test_gpt2_sampling_filters_and_num_return_sequences(gpt2_pair, zh_batch):
    _, ours, _ = gpt2_pair
    ids = zh_batch[0][:1, :8]
    torch.manual_seed(3)
    a = ours.generate(
        ids, do_sample=True, top_k=5, top_p=0.9, temperature=0.8, max_new_tokens=12, num_return_sequences=3
    )
    torch.manual_seed(3)
    b = ours.generate(
        ids, do_sample=True, top_k=5, top_p=0.9, temperature=0.8, max_new_tokens=12, num_return_sequences=3
    )
    assert a.shape == (3, 20) and torch.equal(a, b)
    assert torch.equal(a[:, :8], ids.expand(3, -1))
    # top_k=1 sampling is greedy search
    sampled = ours.generate(ids, do_sample=True, top_k=1, max_new_tokens=12)
    assert torch.equal(sampled, ours.generate(ids, max_new_tokens=12))


def test_gpt2_stops_at_eos_and_pads(gpt2_pair, zh_batch):
    _, ours, _ = gpt2_pair
    ids = zh_batch[0][:2, :8]
    greedy = ours.generate(ids, max_new_tokens=10)
    eos = int(greedy[0, 8 + 2])  # make the third new token of row 0 the end of text
    out = ours.generate(ids, max_new_tokens=10, eos_token_id=eos, pad_token_id=0)
    row = out[0, 8:].tolist()
    first = row.index(eos)
    assert all(t == 0 for t in row[first + 1 :])


def test_generate_bad_input_names_the_value(gpt2_pair):
    _, ours, _ = gpt2_pair
    ids = torch.randint(1000, 2000, (1, 90))
    with pytest.raises(ValueError, match="n_positions=96"):
        ours.generate(ids, max_new_tokens=10)
    out = ours.generate(ids, max_new_tokens=10, truncation=True)
    assert out.shape == (1, 96) and torch.equal(out[0, :86], ids[0, -86:])
    for kw, text in [
        ({"top_p": 1.5}, "top_p must be in \\(0, 1\\], got 1.5"),
        ({"top_p": 0.0}, "got 0.0"),
        ({"temperature": 0.0}, "temperature must be > 0, got 0.0"),
        ({"temperature": -1}, "got -1"),
    ]:
        with pytest.raises(ValueError, match=text):
            ours.generate(ids[:, :5], do_sample=True, max_new_tokens=3, **kw)


def test_gpt2_generate_takes_a_bert_tokenizers_encoding_as_transformers(gpt2_pair, zh_tokenizer):
    """``generate(**tokenizer(prompt, return_tensors="pt"))`` with a BertTokenizer passes token_type_ids,
    which GPT-2 embeds: a sentence pair (types 0 then 1) continues as transformers' does, and the
    prompt may also come as transformers' ``inputs=``."""
    ref, ours, _ = gpt2_pair
    texts = _news(2)
    enc = zh_tokenizer(texts[0][:12], texts[1][:8], return_tensors="pt")
    assert enc["token_type_ids"].max() == 1
    for use_cache in (True, False):
        got = ours.generate(**enc, max_new_tokens=12, use_cache=use_cache)
        assert torch.equal(got, ref.generate(**enc, max_new_tokens=12, do_sample=False, use_cache=use_cache))
    plain = ours.generate(inputs=enc["input_ids"], max_new_tokens=12)
    assert torch.equal(plain, ref.generate(inputs=enc["input_ids"], max_new_tokens=12, do_sample=False))
    with pytest.raises(ValueError, match="token_type_ids has shape"):
        ours.generate(enc["input_ids"], token_type_ids=enc["token_type_ids"][:, :3], max_new_tokens=2)


def test_generation_config_json_sets_generate_defaults_as_in_transformers(gpt2_pair, zh_batch, tmp_path):
    """A folder's generation_config.json gives generate() its defaults (here: 7 new tokens, a repetition
    penalty, no repeated bigrams); explicit arguments and a passed generation_config win; saving keeps the
    file, and greedy search ignores a temperature, all as transformers does."""
    import json
    import shutil

    _, _, folder = gpt2_pair
    shutil.copytree(folder, tmp_path / "gpt2")
    folder = tmp_path / "gpt2"
    settings = {"max_new_tokens": 7, "repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "eos_token_id": 102}
    (folder / "generation_config.json").write_text(json.dumps(settings))
    ref, ours = transformers.GPT2LMHeadModel.from_pretrained(folder).eval(), GPT2LMHeadModel.from_pretrained(folder)
    assert ours.generation_config.max_new_tokens == 7 and ours.generation_config.top_k == 50
    ids = zh_batch[0][:1, :10]
    got = ours.generate(ids)
    assert got.shape == (1, 17) and torch.equal(got, ref.generate(ids))
    assert torch.equal(ours.generate(ids, max_new_tokens=3), ref.generate(ids, max_new_tokens=3))
    assert torch.equal(ours.generate(ids, temperature=0.0), ref.generate(ids, temperature=0.0))
    passed = transformers.GenerationConfig(max_new_tokens=4, no_repeat_ngram_size=1)
    assert torch.equal(ours.generate(ids, generation_config=passed), ref.generate(ids, generation_config=passed))
    ours.save_pretrained(tmp_path / "saved")
    assert transformers.GenerationConfig.from_pretrained(tmp_path / "saved").max_new_tokens == 7
    assert GPT2LMHeadModel.from_pretrained(tmp_path / "saved").generate(ids).shape == (1, 17)
    (folder / "generation_config.json").write_text("{oops")
    with pytest.raises(ValueError, match="generation_config.json"):
        GPT2LMHeadModel.from_pretrained(folder)


def test_generate_scores_and_min_new_tokens_equal_transformers(gpt2_pair, zh_batch):
    """return_dict_in_generate with output_scores / output_logits gives transformers' fields, and
    min_new_tokens holds the end-of-text token back as it does."""
    ref, ours, _ = gpt2_pair
    ids = zh_batch[0][:2, :8]
    kw = {"max_new_tokens": 6, "return_dict_in_generate": True, "output_scores": True, "output_logits": True}
    kw["repetition_penalty"] = 1.2
    a, b = ours.generate(ids, **kw), ref.generate(ids, do_sample=False, **kw)
    assert torch.equal(a.sequences, b.sequences) and len(a.scores) == len(b.scores) == 6
    for mine, theirs in zip(a.scores + a.logits, b.scores + b.logits):
        assert (mine - theirs).abs().max() < 1e-4
    greedy = ours.generate(ids[:1], max_new_tokens=10)
    eos = int(greedy[0, 8 + 1])  # the second new token becomes the end of text
    got = ours.generate(ids[:1], max_new_tokens=10, eos_token_id=eos, min_new_tokens=5)
    want = ref.generate(ids[:1], max_new_tokens=10, eos_token_id=eos, min_new_tokens=5, do_sample=False)
    assert torch.equal(got, want) and eos not in got[0, 8:13].tolist()
    with pytest.raises(ValueError, match="min_new_tokens must be"):
        ours.generate(ids[:1], max_new_tokens=3, min_new_tokens=-1)


# ---------------------------------------------------------------------------------------- Auto classes


def test_auto_classes_dispatch(gpt2_pair, tmp_path):
    _, _, gpt2_dir = gpt2_pair
    assert type(bertkit.AutoModel.from_pretrained(asset_path("minilm"))) is bertkit.BertModel
    assert type(bertkit.AutoModelForCausalLM.from_pretrained(gpt2_dir)) is GPT2LMHeadModel
    assert type(bertkit.AutoModel.from_pretrained(gpt2_dir)) is GPT2Model
    assert type(bertkit.AutoConfig.from_pretrained(gpt2_dir)).__name__ == "GPT2Config"
    transformers.DistilBertForSequenceClassification(
        transformers.DistilBertConfig(n_layers=1, dim=32, n_heads=2, hidden_dim=64)
    ).save_pretrained(tmp_path)
    assert (
        type(bertkit.AutoModelForSequenceClassification.from_pretrained(tmp_path))
        is D.DistilBertForSequenceClassification
    )
    with pytest.raises(ValueError, match="bidirectional encoder"):
        bertkit.AutoModelForCausalLM.from_pretrained(asset_path("minilm"))
    with pytest.raises(ValueError, match="'gpt2' model"):
        bertkit.BertModel.from_pretrained(gpt2_dir)
    (tmp_path / "config.json").write_text('{"model_type": "deberta-v2"}')  # a family bertkit does not implement
    with pytest.raises(ValueError, match="supports: bert, distilbert, gpt2"):
        bertkit.AutoModel.from_pretrained(tmp_path)


def test_auto_tokenizer_honours_tokenizer_class(gpt2_pair, zh_tokenizer, tmp_path):
    _, ours, _ = gpt2_pair
    ours.config.tokenizer_class = "BertTokenizer"
    ours.save_pretrained(tmp_path)
    zh_tokenizer.save_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").unlink()  # only config.json names the class, as in uer's models
    tok = bertkit.AutoTokenizer.from_pretrained(tmp_path)
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text = _news(1)[0]
    assert type(tok).__name__ == "BertTokenizer"
    assert tok(text)["input_ids"] == ref(text)["input_ids"]


def test_generate_on_an_encoder_says_why(tmp_path):
    """A BERT folder or model handed to text generation gets one clear line, not a missing config field."""
    from bertkit.pipelines import pipeline
    from bertkit.pipelines.text_generation import TextGenerationPipeline

    with pytest.raises(ValueError, match="bidirectional encoder"):
        pipeline("text-generation", model=asset_path("minilm"))
    model = bertkit.BertForMaskedLM(bertkit.BertConfig.from_preset("tiny"))
    with pytest.raises(ValueError, match="BertForMaskedLM cannot generate text: bert is a bidirectional encoder"):
        TextGenerationPipeline(model, tokenizer=asset_path("minilm"))
    assert not model.can_generate() and GPT2LMHeadModel.can_generate()
