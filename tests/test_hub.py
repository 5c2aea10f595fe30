"""The one resolver (bertkit.hub): every cache environment variable and the snapshot layout, for the
model weights, the config and the tokenizer together, so a model id never mixes two snapshots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bertkit.assets import asset_path
from bertkit.hub import hub_cache_dirs, resolve_model_path
from bertkit.tokenization import BertTokenizer

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
ENV_VARS = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


def _snapshot(repo: Path, rev: str, files: dict[str, Path | str], mtime: float | None = None) -> Path:
    """A snapshot as huggingface_hub writes it: files are symlinks into blobs/."""
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    blobs = repo / "blobs"
    blobs.mkdir(exist_ok=True)
    for name, content in files.items():
        blob = blobs / f"{rev}-{name}"
        if isinstance(content, Path):
            os.symlink(content, blob)
        else:
            blob.write_text(content, encoding="utf-8")
        os.symlink(blob, snap / name)
    if mtime is not None:
        os.utime(snap, (mtime, mtime))
    return snap


def _repo(cache: Path) -> Path:
    return cache / ("models--" + MODEL_ID.replace("/", "--"))


def _minilm_files(do_lower_case: bool = True) -> dict[str, Path | str]:
    src = asset_path("minilm")
    return {
        "config.json": src / "config.json",
        "model.safetensors": src / "model.safetensors",
        "vocab.txt": src / "vocab.txt",
        "tokenizer_config.json": '{"do_lower_case": %s}' % ("true" if do_lower_case else "false"),
    }


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


# Where each variable puts the hub cache, relative to the variable's value.
LAYOUT = {
    "HF_HUB_CACHE": "",
    "HUGGINGFACE_HUB_CACHE": "",
    "HF_HOME": "hub",
    "XDG_CACHE_HOME": "huggingface/hub",
    None: ".cache/huggingface/hub",  # nothing set: under $HOME
}


@pytest.mark.parametrize("var", list(LAYOUT))
def test_each_cache_variable_finds_model_and_tokenizer_in_one_snapshot(clean_env, tmp_path, var):
    from bertkit.modeling import BertConfig, BertModel

    root = tmp_path / "home" if var is None else tmp_path / "cache"
    if var is not None:
        clean_env.setenv(var, str(root))
    cache = root / LAYOUT[var]
    assert cache in hub_cache_dirs()
    repo = _repo(cache)
    current = _snapshot(repo, "a" * 40, _minilm_files(do_lower_case=True))
    # A newer snapshot (by mtime) that refs/main does not name: it must not be used for anything.
    _snapshot(repo, "b" * 40, _minilm_files(do_lower_case=False), mtime=4e9)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40, encoding="utf-8")

    assert resolve_model_path(MODEL_ID) == current
    model, info = BertModel.from_pretrained(MODEL_ID, output_loading_info=True)
    assert Path(info["weights_file"]).parent == current
    assert BertConfig.from_pretrained(MODEL_ID).hidden_size == model.config.hidden_size == 384
    tok = BertTokenizer.from_pretrained(MODEL_ID)
    assert Path(tok.vocab_file).parent == current
    assert tok.do_lower_case is True  # tokenizer_config.json of the refs/main snapshot


def test_variable_precedence(clean_env, tmp_path):
    for i, var in enumerate(ENV_VARS):
        clean_env.setenv(var, str(tmp_path / str(i)))
    dirs = hub_cache_dirs(tmp_path / "explicit")
    assert dirs[:5] == [
        tmp_path / "explicit",
        tmp_path / "0",
        tmp_path / "1",
        tmp_path / "2" / "hub",
        tmp_path / "3" / "huggingface" / "hub",
    ]
    # The first cache that holds the model wins, for the model and the tokenizer alike.
    first = _snapshot(_repo(tmp_path / "1"), "c" * 40, _minilm_files())
    later = _snapshot(_repo(tmp_path / "2" / "hub"), "d" * 40, _minilm_files())
    assert later != first
    assert resolve_model_path(MODEL_ID) == first
    assert Path(BertTokenizer.from_pretrained(MODEL_ID).vocab_file).parent == first


def test_without_refs_newest_snapshot_with_the_file(clean_env, tmp_path):
    cache = tmp_path / "hub"
    repo = _repo(cache)
    old = _snapshot(repo, "1" * 40, _minilm_files(), mtime=1e9)
    new = _snapshot(repo, "2" * 40, _minilm_files(), mtime=2e9)
    _snapshot(repo, "3" * 40, {"README.md": "no model files"}, mtime=3e9)  # newest, but not a model
    assert resolve_model_path(MODEL_ID, cache_dir=cache) == new
    assert Path(BertTokenizer.from_pretrained(MODEL_ID, cache_dir=cache).vocab_file).parent == new
    # An explicit commit-hash revision picks that snapshot.
    assert resolve_model_path(MODEL_ID, cache_dir=cache, revision="1" * 40) == old
    assert Path(BertTokenizer.from_pretrained(MODEL_ID, cache_dir=cache, revision="1" * 40).vocab_file).parent == old


def test_refs_main_snapshot_missing_a_file_is_an_error_not_a_mix(clean_env, tmp_path):
    from bertkit.modeling import BertModel

    cache = tmp_path / "hub"
    repo = _repo(cache)
    files = _minilm_files()
    del files["model.safetensors"], files["vocab.txt"]
    current = _snapshot(repo, "e" * 40, files)
    _snapshot(repo, "f" * 40, _minilm_files(), mtime=4e9)  # complete, but not what refs/main names
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("e" * 40, encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=f"no weights in {current}"):
        BertModel.from_pretrained(MODEL_ID, cache_dir=cache)
    with pytest.raises(FileNotFoundError, match=f"no vocab.txt .*in {current}"):
        BertTokenizer.from_pretrained(MODEL_ID, cache_dir=cache)


def test_unknown_id_lists_every_place_searched(clean_env, tmp_path):
    clean_env.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(FileNotFoundError) as err:
        BertTokenizer.from_pretrained("bert-base-uncased", cache_dir=tmp_path / "explicit")
    msg = str(err.value)
    for place in (
        tmp_path / "explicit" / "models--bert-base-uncased",
        tmp_path / "explicit" / "models--google-bert--bert-base-uncased",
        tmp_path / "hf" / "hub" / "models--bert-base-uncased",
    ):
        assert str(place) in msg
    assert "no download was attempted" in msg
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model_path("./no/such/folder")
