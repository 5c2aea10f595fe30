"""The writers of `bertkit explain`: one self-contained HTML page, raw JSON, and matplotlib PNGs.

The page carries its data, CSS and JavaScript inline and a Content-Security-Policy that forbids any
request, so it opens from ``file://`` with the network off. Attention is stored as 8-bit numbers
(weight x 255, rounded) and base64: a 128-token text on a 12 x 12 model is 2.4 M weights, 3.1 MB
in the page, where decimal text would take about 12 MB. The page says so; the JSON keeps full
precision.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertkit import _args as A
from bertkit._io import atomic_path, atomic_write_json, atomic_write_text

from .collect import Explanation

__all__ = ["attribution_lines", "html_payload", "prediction_lines", "write_html", "write_json", "write_pngs"]

_ASSETS = Path(__file__).with_name("assets")
_BIG_PAGE = 16_000_000  # bytes of data in the page
_NEURON_BYTES = 1_000_000  # float32 queries and keys in the page (before base64)
_VIEW_SCRIPTS = ("attributions.js", "neuron.js", "lens.js", "focus.js")


def _r(a: Any, digits: int = 4) -> Any:
    """Rounded plain lists for display numbers (the page shows 2-3 digits)."""
    if a is None:
        return None
    return np.round(np.asarray(a, dtype=np.float64), digits).tolist()


def html_payload(ex: Explanation) -> dict[str, Any]:
    """The data object the page's script reads (attention quantized to uint8, base64 per layer)."""
    q = np.clip(np.rint(ex.attentions * 255.0), 0, 255).astype(np.uint8)  # (layers, heads, N, N)
    vectors = ex.sentence_vectors
    names = list(vectors)
    cos = {
        f"{a}|{b}": float(
            np.dot(vectors[a], vectors[b]) / (np.linalg.norm(vectors[a]) * np.linalg.norm(vectors[b]) + 1e-30)
        )
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    }
    payload = {
        "model": ex.model_path,
        "model_class": ex.model_class,
        "config": ex.config,
        "text": ex.text,
        "pair": ex.pair,
        "notes": ex.notes,
        "tokens": ex.tokens,
        "input_ids": ex.input_ids,
        "token_type_ids": ex.token_type_ids,
        "offsets": [list(o) for o in ex.offsets],
        "sequence_ids": ex.sequence_ids,
        "word_ids": ex.word_ids,
        "layers": ex.layers,
        "heads": int(ex.attentions.shape[1]),
        "head_ids": ex.heads,
        "attention_u8": [base64.b64encode(q[i].tobytes()).decode("ascii") for i in range(q.shape[0])],
        "embedding_parts": {k: _r(v) for k, v in ex.embedding_parts.items()},
        "hidden_state_norms": _r(ex.hidden_state_norms),
        "similarity_to_embedding": _r(ex.similarity_to_embedding),
        "cls_vs_mean": _r(ex.cls_vs_mean),
        "head_summaries": {k: _r(v) for k, v in ex.head_summaries.items()},
        "sentence_vectors": {k: {"norm": float(np.linalg.norm(v)), "first": _r(v[:8])} for k, v in vectors.items()},
        "sentence_cosines": cos,
        "predictions": ex.predictions,
        "attributions": _attribution_payload(ex.attributions),
        "neuron": _neuron_payload(ex.neuron),
        "lens": ex.lens,
    }
    if ex.neuron is not None and payload["neuron"] is not None and len(payload["neuron"]["layers"]) < len(ex.layers):
        shown = ", ".join(map(str, payload["neuron"]["layers"]))
        payload["notes"] = [
            *ex.notes,
            f"To keep the page small its neuron view covers layer(s) {shown}; "
            "--layers picks others, and the JSON has the queries and keys of every kept layer.",
        ]
    return payload


def _neuron_payload(neuron: dict[str, Any] | None) -> dict[str, Any] | None:
    """Queries and keys as little-endian float32, base64 per layer: the page recomputes q.k and the softmax.

    Past ``_NEURON_BYTES`` of float32 only the first layers that fit go in the page (at least one).
    """
    if neuron is None or not neuron["layers"]:
        return None
    per_layer = neuron["queries"][0].nbytes + neuron["keys"][0].nbytes
    keep = max(1, _NEURON_BYTES // max(1, per_layer))
    neuron = {
        **neuron,
        "layers": neuron["layers"][:keep],
        "queries": neuron["queries"][:keep],
        "keys": neuron["keys"][:keep],
    }

    def b64(a: np.ndarray) -> str:
        return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")

    return {
        "layers": neuron["layers"],
        "head_size": neuron["head_size"],
        "queries_f32": [b64(q) for q in neuron["queries"]],
        "keys_f32": [b64(k) for k in neuron["keys"]],
    }


def _attribution_payload(att: dict[str, Any] | None) -> dict[str, Any] | None:
    """The attributions with display-rounded scores (the JSON keeps full precision)."""
    if att is None:
        return None
    return {**att, "results": [{**r, "scores": _r(r["scores"], 6)} for r in att["results"]]}


LANGS = ("en", "zh")  # the report's languages: one catalogue assets/strings.<lang>.json each


def check_lang(lang: str) -> str:
    """``lang`` when the report has a catalogue for it; else a one-line ValueError naming those it has."""
    if lang not in LANGS:
        raise ValueError(f"{A.flag('lang')} {lang!r}: the report is written in {', '.join(LANGS)}; choose one of them")
    return lang


@functools.cache
def strings(lang: str) -> dict[str, str]:
    """Every word the report shows in ``lang``: ``html.*`` fill the page's ``{{...}}`` slots, ``png.*``
    label the figures, the rest go to the page's script."""
    return json.loads((_ASSETS / f"strings.{check_lang(lang)}.json").read_text(encoding="utf-8"))


def translate_note(note: str, lang: str) -> str:
    """A note of the report in ``lang``: the catalogue's ``note.*`` entry whose English pattern it
    matches, its {slots} carried over; a note the catalogue lacks stays as it is."""
    if lang == "en":
        return note
    en, there = strings("en"), strings(lang)
    for key, template in en.items():
        if not key.startswith("note."):
            continue
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>.+?)", re.escape(template))
        m = re.fullmatch(pattern, note)
        if m:
            out = there[key]
            for name, value in m.groupdict().items():
                out = out.replace("{" + name + "}", value)
            return out
    return note


def render_html(ex: Explanation, view: str | None = None) -> str:
    """The report page as a string; ``view`` ("head", "model", "neuron", "attributions", "lens") shows only
    that view. Its words are those of ``ex.lang``."""
    catalogue = strings(ex.lang)
    payload = html_payload(ex)
    payload["view"] = view
    payload["lang"] = ex.lang
    payload["strings"] = {k: v for k, v in catalogue.items() if not k.startswith(("html.", "png.", "note."))}
    payload["notes"] = [translate_note(n, ex.lang) for n in payload["notes"]]
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    if len(data) > _BIG_PAGE:
        # A long input on every layer and head makes a page browsers open slowly; say how to make it smaller.
        big = (
            f"This page carries {len(data) / 1e6:.0f} MB of data: --layers "
            "and --heads keep fewer layers and heads (the JSON keeps what they keep, at full "
            "precision)."
        )
        payload["notes"] = [*payload["notes"], translate_note(big, ex.lang)]
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    data = data.replace("</", "<\\/")  # a token such as "</script>" must not end the data block
    page = (_ASSETS / "report.html").read_text(encoding="utf-8")
    css = (_ASSETS / "report.css").read_text(encoding="utf-8")
    # The views in their own files register themselves before report.js runs them.
    js = "\n".join((_ASSETS / name).read_text(encoding="utf-8") for name in _VIEW_SCRIPTS + ("report.js",))
    title = f"bertkit explain: {ex.text[:60]}".replace("&", "&amp;").replace("<", "&lt;")
    page = re.sub(r"\{\{([a-z0-9_.]+)\}\}", lambda m: ex.lang if m[1] == "lang" else catalogue["html." + m[1]], page)
    return page.replace("/*CSS*/", css).replace("/*JS*/", js).replace("__TITLE__", title).replace("/*DATA*/", data)


def write_html(ex: Explanation, path: str | os.PathLike) -> Path:
    """Write the self-contained report page atomically."""
    return atomic_write_text(path, render_html(ex))


def write_json(ex: Explanation, path: str | os.PathLike) -> Path:
    """Write the raw numbers (full float32 values) atomically."""
    return atomic_write_json(path, ex.to_json(), indent=None)


# Fonts with Chinese (and Japanese, Korean) glyphs, the Debian package's first: matplotlib's own DejaVu
# has none, and draws an empty box for every such token.
CJK_FONTS = (
    "WenQuanYi Zen Hei",
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Source Han Sans SC",
    "Droid Sans Fallback",
    "AR PL UMing CN",
    "SimHei",
    "Microsoft YaHei",
    "PingFang SC",
    "Hiragino Sans GB",
    "Arial Unicode MS",
)
CJK_FONT_PACKAGE = "fonts-wqy-zenhei"
_CJK = re.compile("[\u1100-\u11ff\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


@functools.cache
def cjk_font() -> str | None:
    """The name of an installed font with CJK glyphs, or None. A font installed after matplotlib cached
    its font list is found through the system's font folders and added."""
    from matplotlib import font_manager

    manager = font_manager.fontManager
    for attempt in range(2):
        names = {f.name for f in manager.ttflist}
        found = next((name for name in CJK_FONTS if name in names), None)
        if found or attempt:
            return found
        for path in font_manager.findSystemFonts():
            if re.search(r"wqy|cjk|droid|uming|ukai|sourcehan|simhei|msyh|pingfang|hiragino|unicode", path.lower()):
                with contextlib.suppress(Exception):  # a font file matplotlib cannot read is skipped
                    manager.addfont(path)
    return None


def _label_fonts(labels: Sequence[str]) -> dict[str, Any]:
    """matplotlib settings that draw ``labels``: a CJK font after the default where a label needs one
    (each glyph takes the first font that has it), with one warning where none is installed."""
    if not any(_CJK.search(t) for t in labels):
        return {}
    font = cjk_font()
    if font is None:
        if not _CJK_WARNED:
            _CJK_WARNED.append(True)
            warnings.warn(
                f"the PNG figures' Chinese, Japanese or Korean tokens need a CJK font and none is installed; "
                f"they are drawn as boxes (on Debian or Ubuntu: apt-get install {CJK_FONT_PACKAGE})",
                stacklevel=3,
            )
        return {}
    return {"font.family": ["DejaVu Sans", font]}


_CJK_WARNED: list[bool] = []


def write_pngs(ex: Explanation, folder: str | os.PathLike) -> list[Path]:
    """Matplotlib figures: one attention figure per layer (heads tiled), embedding parts, hidden states.
    Tokens in Chinese, Japanese or Korean are drawn with an installed CJK font (:func:`cjk_font`)."""
    import matplotlib

    matplotlib.use("Agg")
    # findfont says at length that the CJK font has a weight of 500 where 400 was asked; it is drawn alike
    quiet = logging.getLogger("matplotlib.font_manager")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with matplotlib.rc_context(
            _label_fonts([*ex.tokens, *strings(ex.lang).values()] if ex.lang != "en" else ex.tokens)
        ):
            return _draw_pngs(ex, folder)
    finally:
        quiet.setLevel(level)


def _draw_pngs(ex: Explanation, folder: str | os.PathLike) -> list[Path]:
    import matplotlib.pyplot as plt

    words = strings(ex.lang)

    def S(key: str, **slots: Any) -> str:
        text = words["png." + key]
        for name, value in slots.items():
            text = text.replace("{" + name + "}", str(value))
        return text

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    labels = ex.tokens
    n = len(labels)
    show_labels = n <= 40

    def save(fig: Any, name: str) -> None:
        with atomic_path(folder / name) as tmp:
            fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(folder / name)

    heads = ex.attentions.shape[1]
    cols = min(heads, 4)
    rows = -(-heads // cols)
    for li, layer in enumerate(ex.layers):
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
        for h in range(rows * cols):
            ax = axes[h // cols][h % cols]
            if h >= heads:
                ax.axis("off")
                continue
            ax.imshow(ex.attentions[li, h], cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_title(S("head", h=ex.heads[h] if ex.heads else h), fontsize=9)
            if show_labels:
                ax.set_xticks(range(n), labels, rotation=90, fontsize=6)
                ax.set_yticks(range(n), labels, fontsize=6)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
        fig.suptitle(S("attention", layer=layer))
        save(fig, f"attention_layer{layer:02d}.png")

    parts = ex.embedding_parts
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * n), 3.6))
    x = np.arange(n)
    width = 0.16
    for i, (key, label) in enumerate(
        [
            ("word", S("word")),
            ("position", S("position")),
            ("token_type", S("token_type")),
            ("sum", S("sum")),
            ("layernorm", S("layernorm")),
        ]
    ):
        ax.bar(x + (i - 2) * width, parts[key], width, label=label)
    ax.set_ylabel(S("norm"))
    ax.set_yscale("log")
    ax.set_title(S("parts"))
    if show_labels:
        ax.set_xticks(x, labels, rotation=90, fontsize=7)
    ax.legend(fontsize=7, ncol=5)
    save(fig, "embedding_parts.png")

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, max(3.5, 0.18 * n)), gridspec_kw={"width_ratios": [3, 2]})
    im = a1.imshow(ex.similarity_to_embedding.T, aspect="auto", cmap="magma", vmin=-0.2, vmax=1.0)
    a1.set_xlabel(S("layer0"))
    a1.set_title(S("similarity"), fontsize=9)
    if show_labels:
        a1.set_yticks(range(n), labels, fontsize=7)
    fig.colorbar(im, ax=a1)
    a2.plot(range(len(ex.cls_vs_mean)), ex.cls_vs_mean, marker="o")
    a2.set_xlabel(S("layer"))
    a2.set_title(S("cls"), fontsize=9)
    a2.grid(alpha=0.3)
    save(fig, "hidden_states.png")
    return written


def prediction_lines(ex: Explanation) -> list[str]:
    """The head's predictions as short text lines (what the CLI prints)."""
    pred = ex.predictions
    if not pred:
        return attribution_lines(ex)
    lines = []
    if pred["kind"] == "masked-lm":
        for row in pred["positions"]:
            tops = ", ".join(f"{t['token']} {t['score']:.3f}" for t in row["top"])
            lines.append(f"position {row['position']} {row['token']}: {tops}")
    if "next_sentence" in pred:
        ns = pred["next_sentence"]
        lines.append(f"next sentence: is next {ns['is_next']:.3f}, random {ns['is_random']:.3f}")
    if pred["kind"] == "sequence-classification":
        lines.extend(f"{x['label']}: {x['score']:.3f}" for x in pred["labels"])
    if pred["kind"] == "token-classification":
        lines.append(" ".join(f"{w['word']}/{w['tag']}" for w in pred["words"]))
    if pred["kind"] == "next-token":
        lines.append(
            f"next token after {pred['after']}: " + ", ".join(f"{t['token']} {t['score']:.3f}" for t in pred["top"])
        )
    if pred["kind"] == "question-answering" and pred["span"] is not None:
        sp = pred["span"]
        lines.append(
            f"answer: {sp['answer']!r} (tokens {sp['start_token']}-{sp['end_token']}, start "
            f"{sp['start_score']:.3f}, end {sp['end_score']:.3f})"
        )
    if pred["kind"] == "replaced-token":
        lines.append("replaced: " + " ".join(f"{t['token']} {t['replaced']:.2f}" for t in pred["tokens"]))
    return lines + attribution_lines(ex)


def attribution_lines(ex: Explanation, top: int = 5) -> list[str]:
    """Each attribution result's strongest tokens (and the completeness residual) as one text line."""
    lines = []
    for r in (ex.attributions or {}).get("results", []):
        scores = np.asarray(r["scores"])
        order = np.argsort(-np.abs(scores))[:top]
        best = ", ".join(f"{ex.tokens[i]} {scores[i]:+.3g}" for i in order)
        extra = "" if r["residual"] is None else f"  (completeness residual {r['residual']:.1e})"
        lines.append(f"{r['method']} for {r['target']['name']}: {best}{extra}")
    return lines
