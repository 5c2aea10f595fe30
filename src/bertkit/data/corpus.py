"""Raw text -> compact token shards (numpy memmaps of token ids plus sentence/document bounds).

Input layouts (``fmt``):

* ``"bert"``: the original BERT layout, one sentence per line, a blank line between documents.
  Lines are never split.
* ``"prose"`` (default): plain prose, one paragraph (or sentence) per line, a blank line between
  documents. Each line goes through :func:`split_sentences`, a rule-based splitter: a sentence ends
  at ``.``, ``!`` or ``?`` (optionally followed by closing quotes/brackets) when whitespace and then
  an upper-case letter, digit, opening quote or bracket follow, except after a known abbreviation
  (``Mr.``, ``Dr.``, ``e.g.``, ...) or a single-letter initial (``J. Smith``). Decimal numbers and
  ``...`` inside a sentence never split because no whitespace follows the dot.
* ``.jsonl`` files: every record's ``"text"`` field (``--jsonl-field``) is one prose document.

Shard folder layout (format ``bertkit-shards-v1``)::

    meta.json                   counts, dtype, vocab size/hash, sources, splitter, shard list
    vocab.txt                   the vocabulary the ids refer to
    shard-00000.tokens.bin      token ids, uint16 (uint32 when the vocab has > 65,535 entries)
    shard-00000.sentences.bin   int64 offsets into tokens, one per sentence boundary (S + 1)
    shard-00000.documents.bin   int64 offsets into sentences, one per document boundary (D + 1)
    shard-00000.words.bin       uint8 per token, 1 where a word starts (only when prepared with
                                ``word_boundaries=True``, for whole-word masking: :mod:`bertkit.data.words`)

Documents never straddle shards. Files are written to a temporary folder that is renamed at the
end (:func:`bertkit._io.atomic_dir`), so a half-written shard folder never looks complete; an
existing non-empty output folder is refused, never replaced. Reading is streaming (line by line), so
corpora larger than memory work.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from bertkit import _args as A
from bertkit._folders import MARKER, claim_output_dir
from bertkit._io import atomic_dir, atomic_update_dir, atomic_write_json
from bertkit._text import (
    ReplacementCounter,
    read_documents,
    read_json,
    split_sentences,
)

__all__ = [
    "split_sentences",
    "read_documents",
    "prepare_corpus",
    "ShardedCorpus",
    "vocab_fingerprint",
    "prepared_cache_dir",
    "ensure_prepared",
    "FORMAT",
]

FORMAT = "bertkit-shards-v1"


def vocab_fingerprint(tokens: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()[:16]


@dataclass
class _ShardWriter:
    folder: Path
    index: int
    dtype: np.dtype
    words: bool = False

    def __post_init__(self) -> None:
        stem = self.folder / f"shard-{self.index:05d}"
        self.tok_f = open(f"{stem}.tokens.bin", "wb")
        self.sent_f = open(f"{stem}.sentences.bin", "wb")
        self.doc_f = open(f"{stem}.documents.bin", "wb")
        self.word_f = open(f"{stem}.words.bin", "wb") if self.words else None
        self.n_tokens = 0
        self.n_sentences = 0
        self.n_documents = 0
        self.sent_f.write(np.zeros(1, np.int64).tobytes())
        self.doc_f.write(np.zeros(1, np.int64).tobytes())

    def add_document(self, sentences: list[list[int]], word_starts: list[np.ndarray] | None = None) -> None:
        lengths = np.fromiter((len(s) for s in sentences), np.int64, len(sentences))
        flat = np.fromiter((t for s in sentences for t in s), self.dtype, int(lengths.sum()))
        self.tok_f.write(flat.tobytes())
        if self.word_f is not None:
            self.word_f.write(np.concatenate(word_starts).astype(np.uint8).tobytes())  # type: ignore[arg-type]
        self.sent_f.write((self.n_tokens + np.cumsum(lengths)).tobytes())
        self.n_tokens += int(lengths.sum())
        self.n_sentences += len(sentences)
        self.n_documents += 1
        self.doc_f.write(np.array([self.n_sentences], np.int64).tobytes())

    def files(self) -> list:
        return [f for f in (self.tok_f, self.sent_f, self.doc_f, self.word_f) if f is not None]

    def close(self) -> dict[str, object]:
        for f in self.files():
            f.close()
        return {
            "name": f"shard-{self.index:05d}",
            "num_tokens": self.n_tokens,
            "num_sentences": self.n_sentences,
            "num_documents": self.n_documents,
        }


def _encoder(tokenizer: object) -> Callable[[list[str]], list[list[int]]]:
    """Fastest available text-batch -> ids path of a tokenizer (no special tokens)."""
    fn = getattr(tokenizer, "encode_batch_ids", None)  # bertkit's BertTokenizer fast path
    if callable(fn):
        return lambda texts: [list(x) for x in fn(texts)]  # type: ignore[misc]

    def encode(texts: list[str]) -> list[list[int]]:
        out = tokenizer(texts, add_special_tokens=False)  # type: ignore[operator]
        ids = out["input_ids"]
        return [list(x) for x in ids]

    return encode


def prepare_corpus(
    files: Sequence[str | os.PathLike],
    tokenizer: object,
    output: str | os.PathLike,
    vocab_tokens: Sequence[str],
    fmt: str = "prose",
    jsonl_field: str = "text",
    shard_tokens: int = 50_000_000,
    batch_sentences: int = 2048,
    progress: bool = True,
    overwrite: bool = False,
    word_boundaries: bool = False,
) -> Path:
    """Tokenize ``files`` once into a shard folder at ``output`` (see module docs); returns it.

    ``output`` must be new or empty, or an earlier prepare-data output and ``overwrite`` given: the
    new folder then replaces it in one rename once complete (files that prepare-data did not write
    stay where they are). ``word_boundaries`` also stores a word-start flag per token for
    whole-word masking; Chinese text is segmented with jieba then (:mod:`bertkit.data.words`, the
    ``[zh]`` extra).
    """
    output = Path(output)
    files = [Path(f) for f in files]
    if not files:
        raise ValueError("no corpus files given")
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"corpus file not found: {f}")
    run = {
        "files": [str(f) for f in files],
        "format": fmt,
        "vocab": vocab_fingerprint(vocab_tokens),
        "word_boundaries": word_boundaries,
    }
    claim = claim_output_dir(
        output, "prepare-data", overwrite=overwrite, run=run, owned=PREPARED_OUTPUTS, legacy=_is_prepared, dry_run=True
    )
    if claim.foreign:
        # Somebody's files sit in our earlier output: replace ours file by file, keep theirs.
        claim = claim_output_dir(
            output, "prepare-data", overwrite=True, run=run, owned=PREPARED_OUTPUTS, legacy=_is_prepared, create=False
        )
        writer = atomic_update_dir(output)
    else:
        # The whole folder is published (or swapped for our earlier one) in one rename when complete.
        writer = atomic_dir(output, replace=output.exists())
    try:
        with writer as tmp:
            _write_shards(
                files,
                tokenizer,
                tmp,
                vocab_tokens,
                fmt,
                jsonl_field,
                shard_tokens,
                batch_sentences,
                progress,
                word_boundaries,
            )
            atomic_write_json(tmp / MARKER, claim.marker(sorted(p.name for p in tmp.iterdir()), tmp), indent=1)
    finally:
        claim.release()
    return output


# What prepare-data writes into its output folder.
PREPARED_OUTPUTS = ("meta.json", "vocab.txt", "shard-*.bin")


def _is_prepared(folder: Path) -> bool:
    """An unmarked shard folder written by an older bertkit."""
    try:
        return json.loads((folder / "meta.json").read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _write_shards(
    files: list[Path],
    tokenizer: object,
    tmp: Path,
    vocab_tokens: Sequence[str],
    fmt: str,
    jsonl_field: str,
    shard_tokens: int,
    batch_sentences: int,
    progress: bool,
    word_boundaries: bool = False,
) -> None:
    if word_boundaries:
        from bertkit.data.words import word_start_encoder

        encode_words = word_start_encoder(tokenizer, vocab_tokens)
    else:
        encode_ids = _encoder(tokenizer)

        def encode_words(texts: list[str]) -> tuple[list[list[int]], list[np.ndarray] | None]:
            return encode_ids(texts), None

    vocab_size = len(vocab_tokens)
    dtype = np.dtype(np.uint16 if vocab_size <= 65535 else np.uint32)
    total_bytes = sum(f.stat().st_size for f in files)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="prepare-data", dynamic_ncols=True)
    shards: list[dict[str, object]] = []
    writer = _ShardWriter(tmp, 0, dtype, word_boundaries)
    replaced: dict[str, int] = {}
    first: tuple[str, int, int] | None = None  # (file, line, byte offset) of the first bad byte
    sources = []
    try:
        for path in files:
            counter = ReplacementCounter()
            n_docs_file = 0
            n_sent_file = 0
            pending: list[list[str]] = []
            pending_n = 0

            def flush() -> None:
                nonlocal writer, n_docs_file, n_sent_file, pending, pending_n
                flat = [s for d in pending for s in d]
                ids, starts = encode_words(flat) if flat else ([], None)
                k = 0
                for d in pending:
                    keep = [j for j in range(k, k + len(d)) if len(ids[j]) > 0]
                    k += len(d)
                    if not keep:
                        continue
                    if writer.n_tokens >= shard_tokens:
                        shards.append(writer.close())
                        writer = _ShardWriter(tmp, len(shards), dtype, word_boundaries)
                    writer.add_document([ids[j] for j in keep], [starts[j] for j in keep] if starts else None)
                    n_docs_file += 1
                    n_sent_file += len(keep)
                pending, pending_n = [], 0

            step = bar.update if bar is not None else None
            for doc in read_documents(path, fmt, jsonl_field, counter, step):
                pending.append(doc)
                pending_n += len(doc)
                if pending_n >= batch_sentences:
                    flush()
            flush()
            if n_sent_file == 0:
                raise ValueError(
                    f"corpus file {path} is empty or has no complete sentence "
                    f"(nothing left after sentence splitting and tokenization)"
                )
            if counter.count:
                replaced[str(path)] = counter.count
                first = first or counter.first
            sources.append({"file": str(path), "documents": n_docs_file, "sentences": n_sent_file})
        shards.append(writer.close())
    except BaseException:
        for f in writer.files():
            f.close()
        raise
    finally:
        if bar is not None:
            bar.close()
    _write_meta(tmp, vocab_tokens, dtype, fmt, word_boundaries, shards, sources, replaced, first)


def _write_meta(
    tmp: Path,
    vocab_tokens: Sequence[str],
    dtype: np.dtype,
    fmt: str,
    word_boundaries: bool,
    shards: list[dict[str, object]],
    sources: list[dict[str, object]],
    replaced: dict[str, int],
    first: tuple[str, int, int] | None,
) -> None:
    """Say what was replaced on screen, then write the prepared folder's meta.json and vocab.txt."""
    vocab_size = len(vocab_tokens)
    if replaced:
        # Kept (as U+FFFD) rather than fatal: a scraped corpus often holds a few stray bytes. But
        # the user must see it on screen, with where to look, not only in meta.json.
        where = f" (first at {first[0]}:{first[1]}, byte offset {first[2]})" if first else ""
        message = (
            f"replaced {sum(replaced.values())} byte(s) that are not valid UTF-8 with U+FFFD{where}: "
            + ", ".join(f"{k}: {v}" for k, v in replaced.items())
            + "; recorded as replaced_bytes in meta.json"
        )
        warnings.warn(message, stacklevel=2)
        print(f"warning: {message}", file=sys.stderr)
    meta = {
        "format": FORMAT,
        "dtype": dtype.name,
        "vocab_size": vocab_size,
        "vocab_fingerprint": vocab_fingerprint(vocab_tokens),
        "layout": fmt,
        "word_boundaries": "WordPiece ## pieces; Chinese words by jieba" if word_boundaries else None,
        "splitter": "rule-based (bertkit.data.corpus.split_sentences)" if fmt == "prose" else "one sentence per line",
        "num_tokens": sum(int(s["num_tokens"]) for s in shards),  # type: ignore[call-overload]
        "num_sentences": sum(int(s["num_sentences"]) for s in shards),  # type: ignore[call-overload]
        "num_documents": sum(int(s["num_documents"]) for s in shards),  # type: ignore[call-overload]
        "replaced_bytes": replaced,
        "sources": sources,
        "shards": shards,
    }
    # Plain writes: the whole folder is published by one rename once everything in it is fsynced.
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
    (tmp / "vocab.txt").write_text("".join(t + "\n" for t in vocab_tokens), encoding="utf-8")


class ShardedCorpus:
    """Read-only view of a shard folder: documents as arrays of sentence token offsets.

    Token positions are global (shard token arrays concatenated); a document's sentences are
    contiguous, so any run of sentences of one document is one slice ``tokens(start, end)``.
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        meta_file = self.folder / "meta.json"
        if not meta_file.is_file():
            raise FileNotFoundError(
                f"{self.folder} is not a prepared corpus (no meta.json); run `bertkit prepare-data` first"
            )
        self.meta = read_json(meta_file)
        if not isinstance(self.meta, dict) or self.meta.get("format") != FORMAT:
            found = self.meta.get("format") if isinstance(self.meta, dict) else self.meta
            raise ValueError(f"{meta_file}: unknown format {found!r}, expected {FORMAT}")
        try:
            self._open_shards()
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            if str(meta_file) in str(e) or str(self.folder) in str(e):
                raise
            raise ValueError(
                f"{meta_file}: damaged or not written by this bertkit ({type(e).__name__}: {e}); prepare the data again"
            ) from None

    def _open_shards(self) -> None:
        dtype = np.dtype(self.meta["dtype"])
        self._tokens: list[np.ndarray] = []
        self._words: list[np.ndarray] = []
        self.has_word_starts = bool(self.meta.get("word_boundaries"))
        sent_bounds: list[np.ndarray] = []
        doc_bounds: list[np.ndarray] = []
        tok_base = 0
        sent_base = 0
        for shard in self.meta["shards"]:
            stem = self.folder / str(shard["name"])
            n = int(shard["num_tokens"])
            toks = np.memmap(f"{stem}.tokens.bin", dtype=dtype, mode="r", shape=(n,)) if n else np.zeros(0, dtype)
            sents = np.fromfile(f"{stem}.sentences.bin", dtype=np.int64)
            docs = np.fromfile(f"{stem}.documents.bin", dtype=np.int64)
            if len(sents) != int(shard["num_sentences"]) + 1 or len(docs) != int(shard["num_documents"]) + 1:
                raise ValueError(f"{stem}: shard files are truncated or inconsistent with meta.json")
            self._tokens.append(toks)
            if self.has_word_starts:
                wfile = Path(f"{stem}.words.bin")
                if not wfile.is_file() or wfile.stat().st_size != n:
                    raise ValueError(f"{wfile}: missing or not one byte per token ({n} tokens)")
                self._words.append(
                    np.memmap(wfile, dtype=np.uint8, mode="r", shape=(n,)) if n else np.zeros(0, np.uint8)
                )
            # Sentence start offsets (global) and document -> first sentence (global).
            sent_bounds.append(sents[:-1] + tok_base)
            doc_bounds.append(docs[:-1] + sent_base)
            tok_base += n
            sent_base += len(sents) - 1
        self.num_tokens = tok_base
        self.sentence_starts = np.concatenate(sent_bounds + [np.array([tok_base], np.int64)])
        self.document_starts = np.concatenate(doc_bounds + [np.array([sent_base], np.int64)])
        self._shard_starts = np.cumsum([0] + [len(t) for t in self._tokens])
        self.vocab_size = int(self.meta["vocab_size"])

    @property
    def num_documents(self) -> int:
        return len(self.document_starts) - 1

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_starts) - 1

    def document_sentences(self, doc: int) -> np.ndarray:
        """Sentence boundaries of document ``doc`` as token offsets (length = sentences + 1)."""
        s0, s1 = self.document_starts[doc], self.document_starts[doc + 1]
        return self.sentence_starts[s0 : s1 + 1]

    def tokens(self, start: int, end: int) -> np.ndarray:
        """Token ids in global positions [start, end) (must lie inside one document)."""
        if end <= start:
            return np.zeros(0, np.int64)
        i = int(np.searchsorted(self._shard_starts, start, side="right")) - 1
        base = self._shard_starts[i]
        return np.asarray(self._tokens[i][start - base : end - base], dtype=np.int64)

    def word_starts(self, start: int, end: int) -> np.ndarray:
        """Word-start flags (bool) of global positions [start, end); the first is always True."""
        if not self.has_word_starts:
            raise ValueError(f"{self.folder} was prepared without word boundaries")
        if end <= start:
            return np.zeros(0, bool)
        i = int(np.searchsorted(self._shard_starts, start, side="right")) - 1
        base = self._shard_starts[i]
        out = np.asarray(self._words[i][start - base : end - base], dtype=bool)
        out[0] = True  # a segment cut inside a word starts a (partial) word
        return out

    def document_tokens(self) -> np.ndarray:
        """Tokens per document (for splitting by size)."""
        starts = self.sentence_starts[self.document_starts]
        return np.diff(starts)


def prepared_cache_dir(
    files: Sequence[str | os.PathLike],
    vocab_tokens: Sequence[str],
    fmt: str,
    lower_case: bool,
    jsonl_field: str = "text",
    word_boundaries: bool = False,
) -> Path:
    """Cache folder for on-the-fly preparation, keyed by the files (path, size, mtime), vocab and options."""
    h = hashlib.sha256()
    for f in files:
        st = Path(f).stat()
        h.update(f"{Path(f).resolve()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    h.update(f"{vocab_fingerprint(vocab_tokens)}|{fmt}|{lower_case}|{jsonl_field}".encode())
    if word_boundaries:  # appended only when set, so existing caches keep their names
        h.update(b"|words")
    root = Path(os.environ.get("BERTKIT_CACHE", Path.home() / ".cache" / "bertkit")) / "prepared"
    return root / h.hexdigest()[:20]


def _check_cache_holds(out: Path, files: Sequence[str | os.PathLike], tokens: Sequence[str], fmt: str) -> None:
    """A named cache folder is reused only for the corpus it was prepared from: the automatic
    folders are keyed by their inputs, a given one is not, so its meta must name the same files."""
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    had = [str(Path(s["file"]).resolve()) for s in meta.get("sources", [])]
    want = [str(Path(f).resolve()) for f in files]
    if had != want or meta.get("vocab_fingerprint") != vocab_fingerprint(tokens) or meta.get("layout") != fmt:
        raise ValueError(
            f"{A.given('cache_dir', str(out))} holds data prepared from {', '.join(had) or 'other input'} "
            f"(vocabulary {meta.get('vocab_fingerprint')}, format {meta.get('layout')}), not from "
            f"{', '.join(want)} (vocabulary {vocab_fingerprint(tokens)}, format {fmt}); give another "
            f"{A.flag('cache_dir')}"
        )


def ensure_prepared(
    files: Sequence[str | os.PathLike],
    vocab: str | os.PathLike,
    fmt: str = "prose",
    lower_case: bool = True,
    jsonl_field: str = "text",
    progress: bool = True,
    cache_dir: str | os.PathLike | None = None,
    word_boundaries: bool = False,
) -> Path:
    """Prepare ``files`` into the cache unless already there (rank 0 prepares, others wait)."""
    from bertkit.tokenization import load_tokenizer, load_vocab

    for f in files:
        if not Path(f).is_file():
            raise FileNotFoundError(f"corpus file not found: {f}")
    tokens = list(load_vocab(vocab))
    out = (
        Path(cache_dir)
        if cache_dir
        else prepared_cache_dir(files, tokens, fmt, lower_case, jsonl_field, word_boundaries)
    )
    if (out / "meta.json").is_file():
        if cache_dir:
            _check_cache_holds(out, files, tokens, fmt)
        return out
    if int(os.environ.get("RANK", "0")) != 0:
        deadline = time.time() + 3600
        while not (out / "meta.json").is_file():
            if time.time() > deadline:
                raise TimeoutError(f"rank 0 did not finish preparing {out} within an hour")
            time.sleep(1.0)
        return out
    print(f"preparing {len(files)} corpus file(s) into {out}", file=sys.stderr)
    prepare_corpus(
        files,
        load_tokenizer(vocab, lower_case),
        out,
        tokens,
        fmt=fmt,
        jsonl_field=jsonl_field,
        progress=progress,
        word_boundaries=word_boundaries,
    )
    return out
