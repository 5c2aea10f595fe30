"""The `bertkit explain` report in a real headless Chromium (Playwright driving Debian's chromium).

* With the network off, the page loads with no request other than the file itself and no console error.
* Hovering a piece highlights its characters; switching layer or head changes what the head view draws;
  the model view has one heatmap per layer x head and opens one large on click.
* Screenshots are not blank.
* A text over 512 tokens shows the truncation note; a bert-base-shaped model on 128 tokens stays under 5 MB.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.assets import asset_path
from bertkit.explain import collect, load_model
from bertkit.explain.report import write_html

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
    reason="!!! /usr/bin/chromium is missing: the browser tests of the explain report DID NOT RUN "
    "(`make test` installs Debian's chromium; run it as root) !!!",
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


class Page:
    """A loaded report with the requests and console errors seen while loading it."""

    def __init__(self, ctx, path: Path):
        self.page = ctx.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.url = path.resolve().as_uri()
        self.page.goto(self.url)
        self.page.wait_for_selector("body[data-rendered]", timeout=30000)

    def canvas(self, selector: str) -> str:
        return self.page.eval_on_selector(selector, "c => c.toDataURL()")


def _image(png: bytes) -> np.ndarray:
    import matplotlib.image

    return matplotlib.image.imread(io.BytesIO(png), format="png")


def _not_blank(png: bytes) -> None:
    img = _image(png)[..., :3]
    colours = np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50, f"only {len(colours)} colours: the screenshot is blank"
    assert img.std() > 0.05


@pytest.fixture(scope="module")
def minilm_report(tmp_path_factory) -> tuple[Path, object]:
    model, tok, _ = load_model(asset_path("minilm"))
    ex = collect(model, tok, "The cat sat on the mat, unheard of.", "It was a sunny day.", model_path="minilm")
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_html(ex, path)
    return path, ex


def test_loads_offline_with_no_other_request_and_no_console_error(browser, minilm_report):
    path, ex = minilm_report
    p = Page(browser, path)
    assert p.requests == [p.url]
    assert p.errors == []
    assert p.page.locator("#chips .chip").count() == len(ex.tokens)
    assert "encoder only" in p.page.inner_text("#notes")
    assert "8-bit" in p.page.inner_text("#quantnote")
    p.page.close()


def test_hover_highlights_the_characters_of_a_piece(browser, minilm_report):
    path, ex = minilm_report
    p = Page(browser, path)
    i = ex.tokens.index("##heard")
    p.page.locator("#chips .chip").nth(i).hover()
    start, end = ex.offsets[i]
    assert p.page.inner_text("#text0 mark") == ex.text[start:end] == "heard"
    j = len(ex.tokens) - 3  # a piece of the second text
    p.page.locator("#chips .chip").nth(j).hover()
    start, end = ex.offsets[j]
    assert p.page.inner_text("#text1 mark") == ex.pair[start:end]
    assert p.page.locator("#text0 mark").count() == 0
    p.page.close()


def test_switching_layer_and_heads_changes_the_head_view(browser, minilm_report):
    path, _ = minilm_report
    p = Page(browser, path)
    first = p.canvas("#hv")
    p.page.select_option("#layer", "3")
    layer3 = p.canvas("#hv")
    assert layer3 != first
    p.page.uncheck("#headtoggles input[data-head='0']")
    without0 = p.canvas("#hv")
    assert without0 != layer3
    p.page.check("#headtoggles input[data-head='0']")
    assert p.canvas("#hv") == layer3  # the same layer and heads draw the same picture
    p.page.click("#noheads")
    assert p.canvas("#hv") not in (layer3, without0)
    p.page.click("#allheads")
    box = p.page.locator("#hv").bounding_box()
    p.page.mouse.move(box["x"] + 60, box["y"] + 24 + 18 * 2 + 9)  # hover token 2 on the left
    assert p.canvas("#hv") != layer3
    p.page.mouse.move(box["x"] + box["width"] + 50, box["y"] + 5)
    assert p.canvas("#hv") == layer3
    _not_blank(p.page.locator("#headview").screenshot())
    p.page.close()


def test_model_view_grid_and_click_to_enlarge(browser, minilm_report):
    path, ex = minilm_report
    p = Page(browser, path)
    p.page.click("#tab-model")
    assert p.page.is_visible("#modelview") and not p.page.is_visible("#headview")
    cells = p.page.locator("#grid canvas")
    assert cells.count() == 6 * 12
    a = p.canvas("#grid canvas[data-layer='0'][data-head='0']")
    b = p.canvas("#grid canvas[data-layer='5'][data-head='7']")
    assert a != b
    _not_blank(p.page.locator("#modelview").screenshot())
    p.page.click("#grid canvas[data-layer='5'][data-head='7']")
    assert p.page.is_visible("#overlay")
    assert "layer 5, head 7" in p.page.inner_text("#overlaytitle")
    big = _image(p.page.locator("#big").screenshot())
    assert big.shape[0] > 300 and big.shape[1] > 300
    _not_blank(p.page.locator("#big").screenshot())
    p.page.click("#overlayclose")
    assert not p.page.is_visible("#overlay")
    # the per-head summary table follows the metric selector
    before = p.page.inner_text("#summary")
    p.page.select_option("#metric", "cls")
    assert p.page.inner_text("#summary") != before
    assert f"{float(ex.head_summaries['cls'][2][3]):.2f}" in p.page.inner_text("#summary tr:nth-child(4)")
    p.page.close()


def test_truncation_note_is_visible(browser, tmp_path):
    model, tok, _ = load_model(asset_path("minilm"))
    text = " ".join(asset_path("austen").read_text(encoding="utf-8").split()[:700])
    ex = collect(model, tok, text, layers="5", model_path="minilm")
    path = write_html(ex, tmp_path / "long.html")
    p = Page(browser, path)
    note = p.page.locator("#notes .note", has_text="truncated to 512")
    assert note.is_visible()
    assert p.errors == [] and p.requests == [p.url]
    p.page.close()


@pytest.mark.slow
def test_bert_base_shape_on_128_tokens_stays_under_5_mb(browser, tmp_path):
    from bertkit.modeling import BertConfig, BertForMaskedLM
    from bertkit.tokenization import BertTokenizer

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig()).eval()  # 12 layers x 12 heads, hidden 768
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    words = asset_path("wiki").read_text(encoding="utf-8").split()
    ids = tok(" ".join(words[:400]), truncation=True, max_length=128)["input_ids"]
    text = tok.decode(ids[1:-1])
    ex = collect(model, tok, text, model_path="random bert-base shape")
    assert ex.num_tokens == 128 and ex.attentions.shape == (12, 12, 128, 128)
    path = write_html(ex, tmp_path / "base.html")
    size = path.stat().st_size
    assert size < 5 * 1024 * 1024, f"{size / 2**20:.2f} MiB"
    p = Page(browser, path)
    assert p.errors == [] and p.requests == [p.url]
    assert p.page.locator("#grid canvas").count() == 144
    p.page.close()
