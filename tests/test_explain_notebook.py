"""Reports in a real notebook: docs/understanding-bert.ipynb executed by nbclient on an ipykernel.

Every ``text/html`` output the kernel produced is put on one page, as a notebook front end shows
them, and the page is opened in headless Chromium with the network off: no request other than the
page itself, no page or console error, every report draws (a canvas or coloured tokens), and the
reports are independent (each its own iframe document with its own ids and script state).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "understanding-bert.ipynb"
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


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    work = tmp_path_factory.mktemp("nb")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel imports this checkout's bertkit and runs on one thread, as the rest of the suite
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    src = str(ROOT / "src")
    if src not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = src + os.pathsep + os.environ.get("PYTHONPATH", "")
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}
    )
    client.execute()
    return nb, work


def _html_outputs(nb) -> list[str]:
    return [
        o["data"]["text/html"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") in ("display_data", "execute_result") and "text/html" in o.get("data", {})
    ]


def test_notebook_runs_and_its_reports_render_offline(executed):
    nb, work = executed
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors
    text = "".join(
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o["output_type"] == "stream" and o.get("name") == "stdout"
    )
    assert "['a', 'previously', 'un', '##heard', 'track']" in text
    assert "layer 0: cosine of the two 'bank' vectors 1.000" in text
    assert "completeness residual" in text
    assert (work / "runs" / "notebook" / "polarity.html").stat().st_size > 10_000
    outputs = _html_outputs(nb)
    assert len(outputs) == 3  # the whole report, its neuron view, the classifier's attributions
    for h in outputs:
        assert h.startswith("<iframe") and 'sandbox="allow-scripts"' in h
        assert "http://" not in h and "https://" not in h  # nothing to fetch from anywhere
    ids = [h.split('id="', 1)[1].split('"', 1)[0] for h in outputs]
    assert len(set(ids)) == 3

    if not CHROMIUM.exists():
        pytest.skip("!!! /usr/bin/chromium is missing: the notebook outputs were not rendered !!!")
    sync_api = pytest.importorskip("playwright.sync_api")
    page_path = work / "outputs.html"
    page_path.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
        + "".join(f"<div class='output'>{h}</div>" for h in outputs)
        + "</body></html>",
        encoding="utf-8",
    )
    with sync_api.sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=ARGS, viewport={"width": 1280, "height": 900}
        )
        ctx.set_offline(True)
        page = ctx.new_page()
        requests, page_errors = [], []
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: page_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: page_errors.append(str(e)))
        page.goto(page_path.as_uri())
        frames = [page.frame_locator(f"#{i}") for i in ids]
        for f in frames:
            f.locator("body[data-rendered]").wait_for(state="attached", timeout=30000)
        whole, neuron, attributions = frames
        assert whole.locator("#hv").is_visible() and whole.locator("#chips .chip").count() == 18
        assert neuron.locator("#neuronview").is_visible() and not neuron.locator("#headview").is_visible()
        assert attributions.locator("#attributions").is_visible()
        assert attributions.locator(".attr-method").count() == 2
        # each view drew: canvases with more than one colour, tokens coloured by their score
        for f, sel in ((whole, "#hv"), (neuron, "#nv")):
            colours = f.locator(sel).evaluate(
                "c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, s = new Set();"
                " for (let i = 0; i < d.length; i += 4 * 7) s.add(d[i] << 16 | d[i + 1] << 8 | d[i + 2]);"
                " return s.size; }"
            )
            assert colours > 20, (sel, colours)
        shades = {
            attributions.locator(".attr-tok").nth(i).evaluate("e => getComputedStyle(e).backgroundColor")
            for i in range(attributions.locator(".attr-tok").count())
        }
        assert len(shades) > 3
        # independent: changing the layer in one report leaves the same control of another alone
        before = neuron.locator("#hv").evaluate("c => c.toDataURL()")
        whole.locator("#layer").select_option(label="5")  # the third kept layer
        assert whole.locator("#layer").input_value() == "2"
        assert neuron.locator("#layer").input_value() == "0"
        assert neuron.locator("#hv").evaluate("c => c.toDataURL()") == before
        assert [u for u in requests if not u.startswith(("file://", "about:"))] == []
        assert page_errors == []
        ctx.close()


def test_report_object_api(tmp_path):
    import json

    from bertkit.assets import asset_path
    from bertkit.explain import explain

    report = explain(asset_path("minilm"), "Hello, BERT.", layers="1")
    assert report.html is None and report.explanation is not None
    data = report.to_json()
    assert data["layers"] == [1] and len(data["neuron"]["queries"][0]) == 12
    json.dumps(data)  # plain JSON
    page = report.save_html(tmp_path / "r.html")
    assert "Content-Security-Policy" in page.read_text(encoding="utf-8")
    a, b = report._repr_html_(), report._repr_html_()
    assert a.split('id="', 1)[1][:30] != b.split('id="', 1)[1][:30]  # every display gets its own frame id
    assert "&quot;view&quot;:&quot;neuron&quot;" in report.show("neuron")._repr_html_()
    with pytest.raises(ValueError, match="choose from head, model, neuron, attributions"):
        report.show("graph")
    with pytest.raises(ValueError, match="no attributions"):
        report.show("attributions")


def test_a_kernel_started_below_the_checkout_finds_its_assets(tmp_path, monkeypatch):
    """Jupyter starts a notebook's kernel in the notebook's folder (docs/), where ./.assets is not: the
    assets a checkout fetched are found above it, not reported missing."""
    from bertkit.assets import asset_path, assets_dir

    monkeypatch.delenv("BERTKIT_ASSETS", raising=False)
    (tmp_path / ".assets" / "vocab").mkdir(parents=True)
    (tmp_path / ".assets" / "vocab" / "uncased.txt").write_text("[PAD]\n", encoding="utf-8")
    (tmp_path / "docs" / "deeper").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "docs" / "deeper")
    assert assets_dir() == tmp_path / ".assets"
    assert asset_path("vocab-uncased") == tmp_path / ".assets" / "vocab" / "uncased.txt"
    (tmp_path / "docs" / ".assets").mkdir()  # an empty one in the working folder's parent is not a cache
    assert assets_dir() == tmp_path / ".assets"
    monkeypatch.chdir(tmp_path / "docs")  # one in the working folder is where fetch-assets writes
    assert assets_dir() == tmp_path / "docs" / ".assets"


def test_the_notebook_runs_twice_in_one_folder(executed):
    """ "Restart & run all" ran once: the second fine-tune met the first one's output folder."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb, work = executed
    again = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(
        again, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}
    ).execute()
    assert not [o for c in again.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
