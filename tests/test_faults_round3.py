"""Fault suite, round 3: the faults a hostile pass found in `train-embedder`, `train-reranker`,
`evaluate-embeddings`, `index`, `search`, `serve` and the sentence-transformers classes.

One test per fault, named after it; each fails without its fix. One tiny random model, one index and
one server are shared by the module, so the file stays cheap.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from test_faults_newer_commands import TEXTS, _corpus, one_error_line, run, tree_hash

from bertkit.assets import asset_path

try:
    VOCAB = asset_path("vocab-uncased")
except FileNotFoundError as e:  # pragma: no cover - `make test` fetches the assets
    pytest.skip(str(e), allow_module_level=True)

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _tiny(folder: Path, seed: int, head: str = "pretraining") -> Path:
    """A random-init tiny BERT with the real uncased vocabulary: its pretraining model, or with
    ``head="ranker"`` a one-logit cross-encoder."""
    from bertkit.modeling import BertConfig, BertForPreTraining, BertForSequenceClassification
    from bertkit.tokenization import BertTokenizer

    tok = BertTokenizer(VOCAB)
    torch.manual_seed(seed)
    if head == "ranker":
        cfg = BertConfig.from_preset("tiny", vocab_size=len(tok), num_labels=1)
        BertForSequenceClassification(cfg).save_pretrained(folder, tokenizer=tok)
    else:
        BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=len(tok))).save_pretrained(folder, tokenizer=tok)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    return {
        "a": _tiny(d / "a", 0),
        "b": _tiny(d / "b", 1),
        "ranker": _tiny(d / "ranker", 2, "ranker"),
    }


def _index(models: dict[str, Path], folder: Path) -> Path:
    from bertkit.search import build_index

    folder.mkdir(parents=True, exist_ok=True)
    return build_index(models["a"], _corpus(folder, TEXTS), folder / "idx", progress=False, dtype="fp32")


def _hybrid(index_dir: Path, models: dict[str, Path], query: str) -> list[dict]:
    from bertkit.search import embed_queries, load_index

    idx = load_index(index_dir)
    return idx.search(embed_queries(models["a"], [query], dtype="fp32"), 3, [query], 0.9)[0]


# ------------------------------------------------------------------- silently wrong or damaged on disk


def test_01_bm25_hashed_and_built_from_one_read(tmp_path, models):
    """The index changes between load_index and the first hybrid search (the CLI's model load, a server's
    lifetime): the BM25 file saved then must hold the postings of the texts it is tagged with."""
    from bertkit.search import load_index
    from bertkit.search.index_update import add_to_index, delete_from_index

    idx_dir = _index(models, tmp_path)
    old = load_index(idx_dir)
    add_to_index(idx_dir, [("z", "zebra crossing")])
    old.lexical  # noqa: B018  (what a search through the old object builds and saves)
    hits = _hybrid(idx_dir, models, "zebra")  # refused before ("BM25 index holds 8 texts but there are 9")
    assert hits[0]["id"] == "z"
    # a delete and an add of the same count: the stale postings fit, and the new word was found nowhere
    old = load_index(idx_dir)
    delete_from_index(idx_dir, ["1"])
    add_to_index(idx_dir, [("w", "walrus")])
    old.lexical  # noqa: B018
    hits = _hybrid(idx_dir, models, "walrus")
    assert hits[0]["id"] == "w" and hits[0]["bm25"] > 0


def test_02_listwise_negatives_exclude_every_positive(tmp_path):
    from bertkit.sentence.cross_encoder.reranker import listwise_groups

    rows = [
        {"query": "q", "passage": "P1", "label": 1},
        {"query": "q", "passage": "P2", "label": 1},
        {"query": "q", "passage": "P3", "label": 1},
        {"query": "q", "passage": "N1", "label": 0},
        {"query": "r", "passage": "Z1", "label": 1},
        {"query": "r", "passage": "Z2", "label": 0},
        {"query": "r", "passage": "Z3", "label": 0},
    ]
    positives = {"q": {"P1", "P2", "P3"}, "r": {"Z1"}}
    for seed in range(20):
        groups = listwise_groups(rows, 3, seed)
        assert len(groups) == 4
        for g in groups:
            assert g["passages"][0] in positives[g["query"]]
            assert not set(g["passages"][1:]) & positives[g["query"]], (seed, g)


def test_03_search_and_serve_refuse_another_models_index(capsys, tmp_path, models):
    from bertkit.serving.process import free_port

    idx_dir = _index(models, tmp_path)
    before = (idx_dir / "meta.json").read_bytes()
    rc, out, err = run(capsys, "search", "--index", idx_dir, "--model", models["b"], "a film", "--dtype", "fp32")
    line = one_error_line(err)
    assert rc == 1 and not out and str(models["a"]) in line and f"--model {models['b']}" in line
    pytest.importorskip("fastapi")
    rc, _, err = run(capsys, "serve", "--model", models["b"], "--index", idx_dir, "--port", free_port())
    assert rc == 1 and str(models["a"]) in one_error_line(err)
    # a copy of the same weights in another folder is the same model
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in models["a"].iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    rc, out, err = run(capsys, "search", "--index", idx_dir, "--model", copy, "a film", "--dtype", "fp32")
    assert rc == 0 and "query: a film" in out, err
    assert (idx_dir / "meta.json").read_bytes() == before


def _sts(tmp_path: Path, rows: list[tuple[str, str, float]]) -> Path:
    p = tmp_path / "sts.csv"
    p.write_text("sentence1,sentence2,score\n" + "".join(f"{a},{b},{s}\n" for a, b, s in rows), encoding="utf-8")
    return p


def test_04_undefined_correlation_is_refused_naming_file_and_reason(capsys, tmp_path, models):
    ev = ["evaluate-embeddings", "--model", models["a"], "--no-progress", "--sts"]
    constant = _sts(tmp_path, [("a film", "a movie", 3.0), ("dull", "boring", 3.0), ("great", "bad", 3.0)])
    rc, out, err = run(capsys, *ev, constant)
    line = one_error_line(err)
    assert rc == 1 and str(constant) in line and "score" in line and "undefined" in line and "0.0000" not in out
    single = _sts(tmp_path, [("a film", "a movie", 3.0)])
    rc, out, err = run(capsys, *ev, single)
    assert rc == 1 and str(single) in one_error_line(err) and "at least 2" in err and "0.0000" not in out


def _beir(tmp_path: Path, long_doc: bool = False) -> list[str]:
    qs = {f"q{i}": t for i, t in enumerate(TEXTS[:4])}
    docs = {f"d{i}": t for i, t in enumerate(TEXTS)}
    if long_doc:
        docs["d7"] = "film " * 700
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in qs.items()))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in docs.items()))
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(4)))
    return [f"--{n}={tmp_path / f}" for n, f in (("queries", "q.jsonl"), ("corpus", "c.jsonl"), ("qrels", "qrels.tsv"))]


def test_05_rerank_reports_both_stages_labelled(capsys, tmp_path, models):
    files, out = _beir(tmp_path), tmp_path / "r.json"
    ev = ["evaluate-embeddings", "--model", models["a"], "--no-progress", *files, "--dtype", "fp32"]
    rc, _, err = run(capsys, *ev, "--output", tmp_path / "plain.json")
    assert rc == 0, err
    plain = json.loads((tmp_path / "plain.json").read_text())["retrieval"]
    rerank = ["--rerank", models["ranker"], "--rerank-depth", "3", "--fusion", "rrf", "--output", out]
    rc, stdout, err = run(capsys, *ev, *rerank)
    assert rc == 0, err
    got = json.loads(out.read_text())
    assert got["rerank"] == {"model": str(models["ranker"]), "depth": 3, "fusion": "rrf"}
    assert got["first_stage"] == plain  # the retriever alone, as without --rerank
    assert set(got["retrieval"]) == set(plain) and "first_stage\trecall@10" in stdout


def test_06_over_length_error_names_file_line_id_and_flag(capsys, tmp_path, models):
    files = _beir(tmp_path, long_doc=True)
    rc, out, err = run(capsys, "evaluate-embeddings", "--model", models["a"], "--no-progress", *files)
    line = one_error_line(err)
    assert rc == 1 and f"{tmp_path / 'c.jsonl'}:8 (id 'd7')" in line and "--truncation cut" in line
    assert "truncation='cut'" not in line and "inputs[0]" not in line
    sts = _sts(tmp_path, [("a film", "film " * 700, 1.0), ("dull", "boring", 3.0)])
    rc, out, err = run(capsys, "evaluate-embeddings", "--model", models["a"], "--no-progress", "--sts", sts)
    line = one_error_line(err)
    assert rc == 1 and f"{sts}:2 (sentence2)" in line and "--truncation cut" in line


# ------------------------------------------------------------------------------------ unclear errors


def _with_config(src: Path, dst: Path, **changes) -> Path:
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text(encoding="utf-8"))
    (dst / "config.json").write_text(json.dumps({**cfg, **changes}), encoding="utf-8")
    return dst


def test_07_bad_model_config_is_one_line_naming_file_key_value(capsys, tmp_path, models):
    from bertkit import SentenceTransformer

    corpus = _corpus(tmp_path, TEXTS)
    cases = [("hidden_size", "big", '"hidden_size": "big"'), ("vocab_size", None, '"vocab_size": null')]
    cases.append(("hidden_size", 0, '"hidden_size": 0'))
    for n, (key, value, shown) in enumerate(cases):
        m = _with_config(models["a"], tmp_path / f"m{n}", **{key: value})
        rc, _, err = run(capsys, "index", "--model", m, "--input", corpus, "--output", tmp_path / f"o{n}")
        line = one_error_line(err)
        assert rc == 1 and f"{m / 'config.json'}: {shown}" in line and len(line) < 300, line
        with pytest.raises(ValueError, match="config.json: " + shown.replace('"', '"')) as e:
            SentenceTransformer(str(m))
        assert len(str(e.value)) < 300
    # weights that do not match the config: the first key and its shapes, no keyword no command takes
    m = _with_config(models["a"], tmp_path / "wide", intermediate_size=100)
    rc, _, err = run(capsys, "index", "--model", m, "--input", corpus, "--output", tmp_path / "ow")
    line = one_error_line(err)
    assert rc == 1 and str(m / "model.safetensors") in line and "(512,) in the checkpoint but (100,)" in line
    assert "ignore_mismatched_sizes" not in line and len(line) < 700, line
    with pytest.raises(ValueError, match="ignore_mismatched_sizes=True"):  # from Python the keyword exists
        SentenceTransformer(str(m))


def test_08_fit_refuses_a_label_that_is_not_a_number(tmp_path, models):
    from torch.utils.data import DataLoader

    from bertkit import InputExample, SentenceTransformer, losses

    model = SentenceTransformer(str(models["a"]))
    examples = [InputExample(texts=["a film", "a movie"], label=0.9), InputExample(texts=["dull", "x"], label="high")]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"example 1's label is 'high', not a number: CoSENTLoss takes a number"):
        model.fit([(DataLoader(examples, batch_size=2), losses.CoSENTLoss(model))], epochs=1, show_progress_bar=False)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


# ------------------------------------------------------------------------------------ processes and files


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_10_python_api_never_writes_over_the_models_own_folder(tmp_path, models):
    import shutil

    from torch.utils.data import DataLoader

    from bertkit import CrossEncoder, InputExample, SentenceTransformer, losses

    d = tmp_path / "own"
    shutil.copytree(models["a"], d)
    model = SentenceTransformer(str(d))
    before = tree_hash(d)
    with pytest.raises(ValueError, match=f"save\\(\\): {d} is the folder this model was loaded from.*overwrite=True"):
        model.save(str(d))
    examples = [InputExample(texts=["a film", "a movie"], label=0.9), InputExample(texts=["dull", "x"], label=0.1)]
    objective = [(DataLoader(examples, batch_size=2), losses.CoSENTLoss(model))]
    with pytest.raises(ValueError, match="fit\\(output_path=...\\): .* is the folder this model was loaded from"):
        model.fit(objective, epochs=1, warmup_steps=0, output_path=str(d) + "/", show_progress_bar=False)
    assert tree_hash(d) == before
    model.save(str(d), overwrite=True)  # the keyword that forces it
    assert (d / "modules.json").is_file()
    ce_dir = tmp_path / "ce"
    shutil.copytree(models["ranker"], ce_dir)
    ce, before = CrossEncoder(str(ce_dir)), tree_hash(ce_dir)
    with pytest.raises(ValueError, match=f"CrossEncoder.save\\(\\): {ce_dir} is the folder this model was loaded from"):
        ce.save(str(ce_dir))
    assert tree_hash(ce_dir) == before
    model.save(str(tmp_path / "elsewhere"))
    assert SentenceTransformer(str(tmp_path / "elsewhere")).encode(["a film"]).shape == (1, 128)


# ------------------------------------------------------------------ where the drop-in differs from the references

KEY = "round3-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory, models):
    """One server for the module: the tiny model in two worker processes, an index, hybrid search, an API
    key, a high token flag."""
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from bertkit.serving.process import server_process

    idx_dir = _index(models, tmp_path_factory.mktemp("served"))
    args = ["--dtype", "fp32", "--index", str(idx_dir), "--lexical-weight", "0.5", "--api-key", KEY, "--workers", "2"]
    with server_process(models["a"], [*args, "--max-input-tokens", "100000"]) as srv:
        srv.index_path = idx_dir
        yield srv


def test_01_a_running_server_answers_from_the_changed_index(server, models):
    """`serve --index` learns of an --append made while it runs, and never mixes the old and new index."""
    import httpx

    from bertkit.search.index_update import add_to_index

    auth = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(server.url + "/search", json={"inputs": ["okapi"], "top_k": 3}, headers=auth, timeout=60)
    assert r.status_code == 200 and all(h["id"] != "okapi" for h in r.json()["results"][0]), r.text
    add_to_index(server.index_path, [("okapi", "an okapi grazing")])
    r = httpx.post(server.url + "/search", json={"inputs": ["okapi"], "top_k": 3}, headers=auth, timeout=60)
    assert r.status_code == 200, r.text
    hits = r.json()["results"][0]
    assert hits[0]["id"] == "okapi" and hits[0]["bm25"] > 0


def test_11_drop_in_calls_answer_as_the_references_do(server, models):
    import httpx
    from sentence_transformers import CrossEncoder as STCrossEncoder
    from sentence_transformers import SentenceTransformer as STModel

    from bertkit import CrossEncoder, SentenceTransformer

    # CrossEncoder.predict([]) -> an empty array, as sentence-transformers
    ours_ce = CrossEncoder(str(models["ranker"]))
    theirs_ce = STCrossEncoder(str(models["ranker"]), device="cpu")
    for kw in ({}, {"convert_to_tensor": True}, {"convert_to_numpy": False}):
        got, want = ours_ce.predict([], **kw), theirs_ce.predict([], **kw)
        assert type(got) is type(want) and len(got) == len(want) == 0, kw
    # encode(output_value=None): every output per text; the unpadded parts equal sentence-transformers'
    ours, theirs = SentenceTransformer(str(models["a"])), STModel(str(models["a"]), device="cpu")
    texts = ["a wonderful, moving film", "dull"]
    got, want = ours.encode(texts, output_value=None), theirs.encode(texts, output_value=None)
    assert isinstance(got, list) and len(got) == 2 and isinstance(ours.encode("x", output_value=None), dict)
    for g, w in zip(got, want):
        n = int(w["attention_mask"].sum())
        assert torch.equal(g["input_ids"].cpu(), w["input_ids"][:n].cpu())
        assert torch.equal(g["attention_mask"].cpu(), w["attention_mask"][:n].cpu())
        torch.testing.assert_close(g["token_embeddings"].cpu(), w["token_embeddings"][:n].cpu(), atol=1e-4, rtol=0)
        torch.testing.assert_close(g["sentence_embedding"].cpu(), w["sentence_embedding"].cpu(), atol=1e-5, rtol=0)
    # a lone surrogate is refused, as sentence-transformers refuses it
    with pytest.raises(TypeError):
        theirs.encode(["a\ud800b"])
    with pytest.raises(ValueError, match=r"inputs\[1\] holds a lone surrogate \(U\+D800\) at character 1"):
        ours.encode(["fine", "a\ud800b"])
    # the server: the auth scheme is case-insensitive; an empty text is a 400 on both embedding routes
    for scheme in ("bearer", "BEARER", "Bearer"):
        r = httpx.post(server.url + "/embed", json={"inputs": "a film"}, headers={"Authorization": f"{scheme} {KEY}"})
        assert r.status_code == 200, (scheme, r.text)
    assert (
        httpx.post(server.url + "/embed", json={"inputs": "a"}, headers={"Authorization": "Basic x"}).status_code == 401
    )
    auth = {"Authorization": f"Bearer {KEY}"}
    for route, body in (
        ("/embed", {"inputs": ""}),
        ("/embed", {"inputs": ["a film", " "]}),
        ("/v1/embeddings", {"input": ""}),
        ("/v1/embeddings", {"input": ["a film", ""]}),
    ):
        r = httpx.post(server.url + route, json=body, headers=auth, timeout=60)
        assert r.status_code == 400 and "empty" in r.text, (route, body, r.text)


# ------------------------------------------------------------------------------------------------ smaller


def test_12_eight_smaller_faults(capsys, tmp_path, models, server):
    import httpx

    from bertkit.search.index_update import add_to_index
    from bertkit.serving.process import server_process

    # index and add_to_index follow one rule: a row with an id and a blank text is skipped and counted
    corpus = tmp_path / "c.jsonl"
    rows = [{"id": "a", "text": "a film"}, {"id": "b", "text": "  "}, {"id": "c", "text": "dull"}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    rc, out, err = run(capsys, "index", "--model", models["a"], "--input", corpus, "--output", tmp_path / "idx")
    assert rc == 0 and f"1 row(s) with an id and a blank text were skipped (first: {corpus}:2, id 'b')" in out + err
    lines = []
    assert add_to_index(tmp_path / "idx", [("d", " "), ("e", "great")], on_cut=lines.append) == 1
    assert lines == ["1 row(s) with an id and a blank text were skipped (first: id 'd')"]
    idx = tmp_path / "idx"
    # --rerank-depth below --top-k: each hit says whether its score is the reranker's or the retriever's
    rc, out, err = run(capsys, "search", "--index", idx, "a film", "--rerank", models["ranker"], "--rerank-depth", 1)
    hits = [line for line in out.splitlines() if line.startswith("  ")]
    assert rc == 0 and len(hits) == 3, err
    assert "reranked: logit" in hits[0] and all("not reranked: below --rerank-depth 1" in h for h in hits[1:])
    # a query that is not UTF-8 (argv's bytes arrive as lone surrogates)
    rc, out, err = run(capsys, "search", "--index", idx, "a \udcff film")
    assert rc == 1 and "query 1 is not valid UTF-8 (byte 0xFF at character 2)" in one_error_line(err) and not out
    # a bi-encoder given to --rerank is named as such, not as a 2-label classifier
    rc, out, err = run(capsys, "search", "--index", idx, "a film", "--rerank", models["a"])
    line = one_error_line(err)
    assert rc == 1 and "no scoring head" in line and "BertForPreTraining" in line and "output label" not in line
    # train-embedder: a lone surrogate names its line; a batch over the data says why there are 0 batches
    sur, few = tmp_path / "sur.jsonl", tmp_path / "few.jsonl"
    sur.write_text('{"anchor": "a film", "positive": "a movie"}\n{"anchor": "a \\ud800", "positive": "b"}\n')
    few.write_text("".join(json.dumps({"anchor": a, "positive": a + "!"}) + "\n" for a in ("x", "y", "z")))
    te = ["train-embedder", "--model", models["a"], "--no-progress"]
    rc, _, err = run(capsys, *te, "--train", sur, "--output", tmp_path / "t1")
    assert rc == 1 and f"{sur}:2: column 'anchor' holds a lone surrogate (U+D800)" in one_error_line(err)
    rc, _, err = run(capsys, *te, "--train", few, "--output", tmp_path / "t2", "--batch-size", 8)
    assert rc == 1 and "its 3 example(s) fill no whole batch of 8 (lower the batch size)" in one_error_line(err)
    # /info gives the limit a text meets (the model's 512 positions), not the --max-input-tokens flag's 100000
    limits = httpx.get(server.url + "/info", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()["limits"]
    assert limits["max_input_tokens"] == 512 and limits["max_input_tokens_flag"] == 100000
    # a reranker folder gives no embeddings
    with server_process(models["ranker"], ["--dtype", "fp32"]) as srv:
        for route, body in (("/embed", {"inputs": "a film"}), ("/v1/embeddings", {"input": "a film"})):
            r = httpx.post(srv.url + route, json=body, timeout=60)
            assert r.status_code == 404 and "cross-encoder" in r.text, (route, r.text)
        assert "/embed" not in httpx.get(srv.url + "/info", timeout=30).json()["endpoints"]
        r = httpx.post(srv.url + "/rerank", json={"query": "a film", "texts": ["a movie", "dull"]}, timeout=60)
        assert r.status_code == 200, r.text


# ------------------------------------------------------------------ processes (last: it kills the server)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_09_workers_exit_when_the_parent_is_killed(server):
    """Last in the file: it kills the module's server (`serve --workers 2`) with kill -9."""
    import httpx

    def workers() -> list[int]:
        return [p for p in _children(server.proc.pid) if b"worker_main" in Path(f"/proc/{p}/cmdline").read_bytes()]

    deadline = time.monotonic() + 60
    while len(workers()) < 2 and time.monotonic() < deadline:  # the second may still be loading
        time.sleep(0.2)
    found = workers()
    assert len(found) == 2
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.post(server.url + "/embed", json={"inputs": "a film"}, headers=auth, timeout=60).status_code == 200
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(30)
    try:
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in found) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in found), "workers outlived their parent"
        with pytest.raises(httpx.TransportError):
            httpx.post(server.url + "/embed", json={"inputs": "a film"}, headers=auth, timeout=5)
    finally:
        for p in found:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
