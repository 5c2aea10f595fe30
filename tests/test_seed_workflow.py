"""The transformers workflow of the users' notes, run on bertkit with only the imports changed.

The code blocks below are the notes' snippets verbatim except for their import lines and the model
path (the notes load uer/gpt2-chinese-cluecorpussmall and distilbert-base-uncased-finetuned-sst-2-english
from a local cache; here the same architectures, saved by transformers, stand in for them).
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil

import pytest
import torch
import transformers

from bertkit.assets import asset_path
from bertkit.pipelines.text_generation import join_cjk

PIPELINE_SNIPPET = """
from bertkit import AutoTokenizer, AutoModelForCausalLM
from bertkit import pipeline

cache_dir = CACHE_DIR

model = AutoModelForCausalLM.from_pretrained(cache_dir)
tokenizer = AutoTokenizer.from_pretrained(cache_dir)


from bertkit import pipeline

generator = pipeline(
    task = "text-generation",  # 注意是 "text-generation"，不是 "text-generate"
    model = model,
    tokenizer = tokenizer,
    device = 0  # device=0 表示使用第0块 GPU；如果用 CPU，可以省略这个参数
)

output = generator(
    "今天天气真好啊",  # 输入字符串直接写，不需要 `inputs=`
    max_length = 50,
    num_return_sequences = 1
)

print(output)
"""

SENTIMENT_SNIPPET = """
import torch
import torch.nn.functional as F
from bertkit import AutoTokenizer, AutoModelForSequenceClassification

tokenizer = AutoTokenizer.from_pretrained(CACHE_DIR)
model = AutoModelForSequenceClassification.from_pretrained(CACHE_DIR)

test_senteces = ['today is not that bad', 'today is so bad', 'so good']
batch_input = tokenizer(test_senteces, truncation = True, padding = True, return_tensors = "pt")
tokens = tokenizer.tokenize(test_senteces[0],)
ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(test_senteces[0],))
encoded = tokenizer.encode(test_senteces[0],)
decoded = tokenizer.decode([101, 2651, 2003, 2025, 2008, 2919,  102])
with torch.no_grad():
    outputs = model(**batch_input)
    print(outputs)
    scores = F.softmax(outputs.logits, dim = 1)
    print(scores)
    labels = torch.argmax(scores, dim = 1)
    print(labels)
    # tensor的数据不能直接做索引。要么 .item() 转换要么 .tolist()
    labels = [model.config.id2label[id] for id in labels.tolist()]
    print(labels)
config = model.config
"""


def _run(snippet: str, folder) -> tuple[dict, str]:
    scope: dict = {}
    buf = io.StringIO()
    with (
        contextlib.redirect_stdout(buf),
        pytest.warns(UserWarning, match="no CUDA device")
        if "device = 0" in snippet and not torch.cuda.is_available()
        else contextlib.nullcontext(),
    ):
        exec(compile(snippet.replace("CACHE_DIR", repr(str(folder))), "<seed snippet>", "exec"), scope)  # noqa: S102 - running the notes' code is the test
    return scope, buf.getvalue()


@pytest.fixture(scope="module")
def chinese_gpt2(tmp_path_factory):
    """A GPT-2 with the uer model's layout: bert-base-chinese vocabulary, tokenizer_class BertTokenizer."""
    folder = tmp_path_factory.mktemp("gpt2-zh")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=21128, n_positions=128, tokenizer_class="BertTokenizer"
    )
    transformers.GPT2LMHeadModel(cfg).save_pretrained(folder)
    shutil.copy(asset_path("vocab-chinese"), folder / "vocab.txt")
    return folder


def test_seed_text_generation_snippet_runs_unchanged(chinese_gpt2):
    scope, printed = _run(PIPELINE_SNIPPET, chinese_gpt2)
    output = scope["output"]
    assert isinstance(output, list) and len(output) == 1 and set(output[0]) == {"generated_text"}
    text = output[0]["generated_text"]
    assert text.startswith("今天天气真好啊") and len(text) > len("今天天气真好啊")
    assert str(output) in printed
    assert not re.search(r"[\u4e00-\u9fff] +[\u4e00-\u9fff]", text)  # no WordPiece spaces between characters


def test_text_generation_pipeline_equals_transformers_greedy(chinese_gpt2):
    from bertkit import pipeline

    ours = pipeline("text-generation", model=str(chinese_gpt2))
    theirs = transformers.pipeline("text-generation", model=str(chinese_gpt2), device="cpu")
    for prompt in ["今天天气真好啊", "北京是中国的首都"]:
        a = ours(prompt, max_length=30, do_sample=False)
        b = theirs(prompt, max_length=30, do_sample=False)
        assert len(a) == len(b) == 1
        assert a[0]["generated_text"] == join_cjk(b[0]["generated_text"])
    two = ours("今天", max_new_tokens=5, num_return_sequences=2)
    assert len(two) == 2 and all(r["generated_text"].startswith("今天") for r in two)


@pytest.fixture(scope="module")
def distilbert_sst2(tmp_path_factory):
    """DistilBertForSequenceClassification with the sst-2 model's labels and the bert-base-uncased vocabulary."""
    folder = tmp_path_factory.mktemp("distilbert")
    torch.manual_seed(0)
    cfg = transformers.DistilBertConfig(
        n_layers=2,
        dim=64,
        n_heads=4,
        hidden_dim=128,
        id2label={0: "NEGATIVE", 1: "POSITIVE"},
        label2id={"NEGATIVE": 0, "POSITIVE": 1},
    )
    transformers.DistilBertForSequenceClassification(cfg).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (asset_path("minilm") / name).is_file():
            shutil.copy(asset_path("minilm") / name, folder / name)
    return folder


def test_seed_sentiment_snippet_runs_unchanged(distilbert_sst2):
    scope, printed = _run(SENTIMENT_SNIPPET, distilbert_sst2)
    # The notes' printed ids and text for this sentence (bert-base-uncased vocabulary).
    assert scope["tokens"] == ["today", "is", "not", "that", "bad"]
    assert scope["ids"] == [2651, 2003, 2025, 2008, 2919]
    assert scope["encoded"] == [101, 2651, 2003, 2025, 2008, 2919, 102]
    assert scope["decoded"] == "[CLS] today is not that bad [SEP]"
    ref = transformers.DistilBertForSequenceClassification.from_pretrained(distilbert_sst2).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(distilbert_sst2))
    enc = hf_tok(["today is not that bad", "today is so bad", "so good"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = ref(**enc).logits
    assert torch.allclose(scope["outputs"].logits, expected, atol=1e-5)
    assert scope["labels"] == [ref.config.id2label[i] for i in expected.argmax(1).tolist()]
    assert type(scope["config"]).__name__ == "DistilBertConfig"
    assert "SequenceClassifierOutput" in printed


def test_sentiment_analysis_pipeline_on_a_distilbert_folder(distilbert_sst2):
    from bertkit import pipeline

    ours = pipeline("sentiment-analysis", model=str(distilbert_sst2))
    theirs = transformers.pipeline("sentiment-analysis", model=str(distilbert_sst2), device="cpu")
    for text in ["a gorgeous, witty, seductive movie", "the plot is a mess"]:
        a, b = ours(text)[0], theirs(text)[0]
        assert a["label"] == b["label"] and abs(a["score"] - b["score"]) < 1e-5


def test_automodel_on_minilm_is_bertmodel_with_the_notes_parameter_names():
    from bertkit import AutoModel

    model = AutoModel.from_pretrained(asset_path("minilm"))
    assert type(model).__name__ == "BertModel"
    names = [n for n, _ in model.named_parameters()]
    assert names[0] == "embeddings.word_embeddings.weight"
    assert "encoder.layer.0.attention.self.query.weight" in names
