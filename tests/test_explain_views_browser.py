"""The attributions view, the neuron view and notebook output of `bertkit explain` in headless Chromium.

* Attributions: one column per method, each token coloured by its score with a legend and the
  method's convention; word pieces combine into words; the target selector switches targets.
* Neuron view: q, k, q x k, q.k/sqrt(d) and the softmax row of the selected token; the softmax row the
  page computes from the stored q and k equals the model's attention row.
* Notebook output: a report executed in a real notebook renders offline, with no error, and draws.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from bertkit.assets import asset_path

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="!!! /usr/bin/chromium is missing: the browser tests of the explain views DID NOT RUN !!!",
)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=ARGS, viewport={"width": 1280, "height": 900}
        )
        ctx.set_offline(True)
        yield ctx
        ctx.close()


def open_page(ctx, path: Path):
    """A loaded page, with the requests and errors seen while loading it."""
    page = ctx.new_page()
    page.requests, page.errors = [], []
    page.on("request", lambda r: page.requests.append(r.url))
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-rendered]", timeout=30000)
    return page


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory) -> Path:
    """MiniLM with a seeded random 2-label head, saved as a folder."""
    from bertkit.modeling import BertForSequenceClassification
    from bertkit.tokenization import BertTokenizer

    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(
        asset_path("minilm"),
        num_labels=2,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 0.5)
    folder = tmp_path_factory.mktemp("clf") / "model"
    model.save_pretrained(folder, tokenizer=BertTokenizer.from_pretrained(asset_path("minilm")))
    return folder


@pytest.fixture(scope="module")
def report(classifier_dir, tmp_path_factory):
    from bertkit.explain import explain

    d = tmp_path_factory.mktemp("report")
    res = explain(
        classifier_dir,
        "An unheard-of, warm and funny film.",
        output=d / "r.html",
        attributions=["integrated-gradients", "gradient-x-input", "attention-rollout"],
        layers="1,4",
    )
    return res


def test_attributions_side_by_side_with_legend_and_words(browser, report):
    ex = report.explanation
    page = open_page(browser, report.html)
    assert page.errors == [] and page.requests == [report.html.resolve().as_uri()]
    assert page.is_visible("#attributions")
    cols = page.locator(".attr-method")
    assert cols.count() == 3
    assert [cols.nth(i).get_attribute("data-method") for i in range(3)] == [
        "integrated-gradients",
        "gradient-x-input",
        "attention-rollout",
    ]
    ig = cols.nth(0)
    assert "Integrated gradients" in ig.inner_text() and "completeness residual" in ig.inner_text()
    assert "[PAD]" in ig.inner_text() and ig.locator(".attr-legend").count() == 1
    toks = ig.locator(".attr-tok")
    assert toks.count() == len(ex.tokens)
    scores = ex.attributions["results"][0]["scores"]
    big = max(range(len(scores)), key=lambda i: abs(scores[i]))
    assert float(toks.nth(big).get_attribute("data-score")) == pytest.approx(scores[big], abs=1e-5)
    colours = {toks.nth(i).evaluate("e => getComputedStyle(e).backgroundColor") for i in range(toks.count())}
    assert len(colours) > 3  # coloured by score, not one flat colour
    page.check("#attr-words")
    words = ig.locator(".attr-tok")
    assert words.count() < len(ex.tokens)
    labels = [words.nth(i).inner_text() for i in range(words.count())]
    assert "unheard" in labels and "##heard" not in labels
    i = ex.tokens.index("un")
    merged = sum(scores[j] for j in range(i, i + 2))  # "un" "##heard"
    k = labels.index("unheard")
    assert float(words.nth(k).get_attribute("data-score")) == pytest.approx(merged, abs=1e-5)
    page.close()


def test_neuron_view_recomputes_the_attention_row(browser, report):
    import json

    ex = report.explanation
    page = open_page(browser, report.html)
    assert not page.is_visible("#neuronview")
    page.click("#tab-neuron")
    assert page.is_visible("#neuronview") and not page.is_visible("#headview")
    page.select_option("#neuron-layer", "4")  # the second kept layer
    page.select_option("#neuron-head", "7")
    page.select_option("#neuron-token", "3")
    row = json.loads(page.eval_on_selector("#nv", "c => c.dataset.softmax"))
    assert ex.layers == [1, 4]
    assert max(abs(a - b) for a, b in zip(row, ex.attentions[1, 7, 3])) < 1e-5
    first = page.eval_on_selector("#nv", "c => c.toDataURL()")
    box = page.locator("#nv").bounding_box()
    page.mouse.move(box["x"] + 60, box["y"] + 44 + 16 * 5 + 8)  # hover token 5 on the left
    assert page.input_value("#neuron-token") == "5"
    row5 = json.loads(page.eval_on_selector("#nv", "c => c.dataset.softmax"))
    assert max(abs(a - b) for a, b in zip(row5, ex.attentions[1, 7, 5])) < 1e-5
    assert page.eval_on_selector("#nv", "c => c.toDataURL()") != first
    page.click("#tab-model")
    assert not page.is_visible("#neuronview") and page.is_visible("#modelview")
    assert page.errors == []
    page.close()


@pytest.mark.slow
def test_512_tokens_load_under_3_s_with_decimated_model_view(browser, classifier_dir, tmp_path):
    from bertkit.explain import explain

    text = " ".join(asset_path("austen").read_text(encoding="utf-8").split()[:700])
    res = explain(
        classifier_dir,
        text,
        output=tmp_path / "long.html",
        heads="0-5,11",
        attributions=["gradient-x-input", "attention-rollout"],
    )
    ex = res.explanation
    assert ex.num_tokens == 512 and ex.attentions.shape == (6, 7, 512, 512)
    times = []
    for _ in range(3):  # the best of three loads: other work on a shared machine only adds time
        page = open_page(browser, res.html)
        page.wait_for_selector("body[data-painted]", timeout=30000)
        times.append(float(page.evaluate("document.body.dataset.painted")) / 1000)
        assert page.errors == []
        if min(times) < 3.0:
            break
        page.close()
    assert min(times) < 3.0, f"{times} s from navigation start to painted"
    assert "strongest line" in page.inner_text("#hvlimit")
    assert "--layers and --heads keep fewer" in page.inner_text("#notes")
    assert "neuron view covers layer(s) 0;" in page.inner_text("#notes")  # 1.5 MB of float32 per layer
    assert page.locator("#grid canvas").count() == 6 * 7
    # thumbnails are decimated to 128 x 128; a click opens the full matrix
    size = page.eval_on_selector("#grid canvas[data-layer='5'][data-head='11']", "c => [c.width, c.height]")
    assert size == [128, 128]
    labels = page.inner_text("#headtoggles")
    assert "11" in labels and "6" not in labels.split()
    assert page.locator(".attr-method").count() == 2
    page.close()
