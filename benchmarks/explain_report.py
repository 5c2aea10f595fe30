"""Size and render time of the `bertkit explain` page for a 128-token text on a bert-base-shaped model.

A randomly initialised BertForMaskedLM with bert-base's shape (12 layers x 12 heads, hidden 768)
explains the first 128 tokens of the real Wikipedia text; the page is opened in headless Chromium
(Debian's /usr/bin/chromium) with the network off, and the time from navigation start to the end of
the page's drawing script is read from the page (median of the loads). The budgets are 5 MB and 2 s.

    python benchmarks/explain_report.py [--repeats 5] [--screenshots docs/img]

``--screenshots`` also writes the head view and the model view of the real MiniLM checkpoint on a
sentence pair, as docs/guides/explain.md and docs/understanding-bert.md show them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def cpu_flags() -> str:
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    return " ".join(f for f in ("amx", "amx_tile", "avx512_bf16", "avx512f", "avx2") if f in flags) or "none of them"


def load_times(html: Path, repeats: int, mark: str = "rendered") -> list[float]:
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(
            profile,
            executable_path="/usr/bin/chromium",
            headless=True,
            args=ARGS,
            viewport={"width": 1280, "height": 900},
        )
        ctx.set_offline(True)
        for _ in range(repeats):
            page = ctx.new_page()
            page.goto(html.resolve().as_uri())
            page.wait_for_selector(f"body[data-{mark}]", timeout=60000)
            times.append(float(page.evaluate(f"document.body.dataset.{mark}")) / 1000)
            page.close()
        ctx.close()
    return times


def screenshots(folder: Path) -> None:
    from playwright.sync_api import sync_playwright

    from bertkit._io import atomic_path
    from bertkit.assets import asset_path
    from bertkit.explain import collect, load_model
    from bertkit.explain.report import write_html

    model, tok, _ = load_model(asset_path("minilm"))
    ex = collect(
        model,
        tok,
        "The animal didn't cross the street because it was too tired.",
        "It slept on the pavement.",
        model_path="all-MiniLM-L6-v2",
    )
    with tempfile.TemporaryDirectory() as d, sync_playwright() as p:
        html = write_html(ex, Path(d) / "r.html")
        ctx = p.chromium.launch_persistent_context(
            str(Path(d) / "profile"),
            executable_path="/usr/bin/chromium",
            headless=True,
            args=ARGS,
            viewport={"width": 1100, "height": 900},
        )
        page = ctx.new_page()
        page.goto(html.resolve().as_uri())
        page.wait_for_selector("body[data-rendered]")
        page.select_option("#layer", "2")
        for h in range(12):
            if h not in (0, 5, 9):
                page.uncheck(f"#headtoggles input[data-head='{h}']")
        with atomic_path(folder / "explain_head_view.png") as tmp:
            page.locator("#headview").screenshot(path=str(tmp), type="png")
        page.click("#tab-model")
        with atomic_path(folder / "explain_model_view.png") as tmp:
            page.locator("#modelview").screenshot(path=str(tmp), type="png")
        ctx.close()
    print(f"screenshots: {folder / 'explain_head_view.png'}, {folder / 'explain_model_view.png'}")


def long_input(repeats: int) -> int:
    """The real MiniLM (6 x 12) with a seeded random 2-label head on the first 512 tokens of real text."""
    from bertkit.assets import asset_path
    from bertkit.explain import collect
    from bertkit.explain.attributions import add_to_explanation
    from bertkit.explain.report import write_html
    from bertkit.modeling import BertForSequenceClassification
    from bertkit.tokenization import BertTokenizer

    print(f"CPU flags: {cpu_flags()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(asset_path("minilm"), num_labels=2).eval()
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    text = " ".join(asset_path("austen").read_text(encoding="utf-8").split()[:700])
    ex = collect(model, tok, text, model_path="minilm + random head")
    t0 = time.perf_counter()
    add_to_explanation(model, tok, ex, ["integrated-gradients", "gradient-x-input", "attention-rollout"])
    attr_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        html = write_html(ex, Path(d) / "long.html")
        size = html.stat().st_size
        times = load_times(html, repeats, mark="painted")
    med = statistics.median(times)
    print(
        f"MiniLM 6 x 12, {ex.num_tokens} tokens, every layer and head, 3 attribution methods "
        f"(computed in {attr_s:.1f} s)"
    )
    print(f"page size {size / 1e6:.2f} MB ({size:,} bytes)")
    print(
        f"load in Chromium (navigation start to painted), median of {len(times)}: {med:.3f} s "
        f"[{', '.join(f'{t:.3f}' for t in times)}]  budget 3 s  ratio {med / 3:.2f}"
    )
    return 0 if med < 3 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--screenshots", type=Path, default=None, help="also write the two screenshots into this folder")
    ap.add_argument(
        "--long",
        action="store_true",
        help="instead: MiniLM on 512 tokens, every layer and head, attributions; budget 3 s to painted",
    )
    args = ap.parse_args()
    if args.long:
        return long_input(args.repeats)

    from bertkit.assets import asset_path
    from bertkit.explain import collect
    from bertkit.explain.report import write_html
    from bertkit.modeling import BertConfig, BertForMaskedLM
    from bertkit.tokenization import BertTokenizer

    print(f"CPU flags: {cpu_flags()}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig()).eval()
    tok = BertTokenizer.from_pretrained(asset_path("minilm"))
    ids = tok(" ".join(asset_path("wiki").read_text(encoding="utf-8").split()[:400]), truncation=True, max_length=128)[
        "input_ids"
    ]
    text = tok.decode(ids[1:-1])
    t0 = time.perf_counter()
    ex = collect(model, tok, text, model_path="random bert-base shape")
    collect_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        html = write_html(ex, Path(d) / "base.html")
        write_s = time.perf_counter() - t0
        size = html.stat().st_size
        times = load_times(html, args.repeats)
    med = statistics.median(times)
    print(
        f"bert-base shape (12 x 12, hidden 768), {ex.num_tokens} tokens: collect {collect_s:.2f} s, "
        f"write {write_s:.2f} s"
    )
    print(f"page size {size / 1e6:.2f} MB ({size:,} bytes)  budget 5 MB  ratio {size / 5e6:.2f}")
    print(
        f"render in Chromium (navigation start to drawn), median of {len(times)}: {med:.3f} s "
        f"[{', '.join(f'{t:.3f}' for t in times)}]  budget 2 s  ratio {med / 2:.2f}"
    )
    if args.screenshots is not None:
        screenshots(args.screenshots)
    return 0 if size < 5e6 and med < 2 else 1


if __name__ == "__main__":
    sys.exit(main())
