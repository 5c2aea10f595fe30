"""``SentenceTransformer(modules=[...])`` built from ``bertkit.models`` and folders with a Dense module,
against the real sentence-transformers on the real MiniLM checkpoint and real STS-Lee / polarity text:
the same modules built in both libraries (a Dense given the same init weights) embed alike; a Dense
folder saved by sentence-transformers loads in bertkit with its vectors and bertkit's saved folder loads
back in sentence-transformers; fit trains the Dense as hand-written AdamW steps of
sentence-transformers' loss on its model do; what bertkit cannot compute is refused by name."""

import csv
import json
import shutil
import warnings

import numpy as np
import pytest
import torch
from conftest import without_dropout
from test_sentence_transformer_fit import reference_cosent_steps  # noqa: E402  (the same two reference steps)
from torch import nn
from torch.utils.data import DataLoader

from bertkit import InputExample, SentenceTransformer, losses, models, pipeline
from bertkit.assets import asset_path

st = pytest.importorskip("sentence_transformers")
from sentence_transformers import models as st_models  # noqa: E402

MINILM = str(asset_path("minilm"))
ATOL = 1e-5  # fp32 on both sides: float rounding only


@pytest.fixture(scope="module")
def texts():
    """8 STS-Lee sentences (documents cut to their first words) and 8 polarity sentences."""
    lee = list(csv.DictReader(open(asset_path("sts-lee"), encoding="utf-8")))
    pol = list(csv.DictReader(open(asset_path("polarity-test"), encoding="utf-8")))
    return [" ".join(r["sentence1"].split()[:40]) for r in lee[::50][:8]] + [r["text"] for r in pol[:8]]


def _init(out_features, in_features, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(out_features, in_features, generator=g) * 0.05, torch.randn(out_features, generator=g) * 0.05


def _st_quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():  # v2's pooling_mode_* keywords are deprecated there (FutureWarning)
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# (pooling keywords, Dense (out_features, activation) list, Normalize)
BUILDS = {
    "mean-dense-tanh-normalize": ({"pooling_mode": "mean"}, [(256, nn.Tanh)], True),
    "v2-cls-kwargs": ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, [], True),
    "v2-max-two-dense-identity": ({"pooling_mode_max_tokens": True}, [(128, nn.Identity), (64, nn.ReLU)], False),
    "weightedmean-dense-gelu": ({"pooling_mode": "weightedmean"}, [(96, nn.GELU)], True),
    "lasttoken": ({"pooling_mode": "lasttoken"}, [], False),
    "mean_sqrt_len_tokens-dense": ({"pooling_mode": "mean_sqrt_len_tokens"}, [(384, nn.Tanh)], False),
    # several modes, concatenated: v2's booleans (sentence-transformers' fixed order, cls before mean) ...
    "v2-cls-and-mean-dense": (
        {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True},
        [(128, nn.Tanh)],
        True,
    ),
    # ... and a list in another order (mean before max, max twice), which the saved config must keep
    "mean-max-lasttoken-max-list": ({"pooling_mode": ["mean", "max", "lasttoken", "max"]}, [], False),
}


def _build(lib, pooling_kwargs, dense_specs, normalize, max_len=128):
    tf = lib.Transformer(MINILM, max_seq_length=max_len)
    mods = [tf, _st_quiet(lib.Pooling, tf.get_word_embedding_dimension(), **pooling_kwargs)]
    width = mods[1].get_sentence_embedding_dimension()
    for i, (out, act) in enumerate(dense_specs):
        w, b = _init(out, width, seed=i)
        mods.append(
            lib.Dense(in_features=width, out_features=out, activation_function=act(), init_weight=w, init_bias=b)
        )
        width = out
    if normalize:
        mods.append(lib.Normalize())
    return mods


@pytest.mark.parametrize("build", list(BUILDS))
def test_modules_built_in_code_embed_as_sentence_transformers(build, texts, tmp_path):
    """The same modules in both libraries (Dense given the same init weights) give the same vectors, widths
    and max_seq_length; bertkit's saved folder loads in sentence-transformers with those vectors."""
    spec = BUILDS[build]
    ref = _st_quiet(st.SentenceTransformer, modules=_build(st_models, *spec), device="cpu")
    ours = SentenceTransformer(modules=_build(models, *spec), device="cpu")
    assert ours.max_seq_length == ref.max_seq_length == 128
    assert ours.get_sentence_embedding_dimension() == ref.get_sentence_embedding_dimension()
    want = ref.encode(texts)
    got = ours.encode(texts)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    ours.save(str(tmp_path / "saved"))
    back = _st_quiet(st.SentenceTransformer, str(tmp_path / "saved"), device="cpu")
    np.testing.assert_allclose(back.encode(texts), want, atol=ATOL, rtol=0)


def test_module_questions_answer_as_sentence_transformers():
    """What scripts read off the modules: widths, the default max_seq_length, the v2 pooling keywords'
    mode (sentence-transformers 6.2 reads them as the modes set True, else mean)."""
    ours_tf, ref_tf = models.Transformer(MINILM), st_models.Transformer(MINILM)
    assert ours_tf.max_seq_length == ref_tf.max_seq_length
    assert ours_tf.get_word_embedding_dimension() == ref_tf.get_word_embedding_dimension()
    for kwargs in (
        {},
        {"pooling_mode": "max"},
        {"pooling_mode": ["cls"]},
        {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False, "pooling_mode_max_tokens": False},
        {"pooling_mode_cls_token": True},
        {"pooling_mode_mean_tokens": False},
        {"pooling_mode": ("mean", "max")},
        {"pooling_mode_max_tokens": True, "pooling_mode_cls_token": True},
    ):
        ours, ref = models.Pooling(384, **kwargs), _st_quiet(st_models.Pooling, 384, **kwargs)
        assert ours.pooling_mode == ref.pooling_mode, kwargs
        assert ours.get_sentence_embedding_dimension() == ref.get_sentence_embedding_dimension()
    ours, ref = models.Pooling(word_embedding_dimension=384), _st_quiet(st_models.Pooling, word_embedding_dimension=384)
    assert ours.get_sentence_embedding_dimension() == ref.get_sentence_embedding_dimension()
    ours_d = models.Dense(in_features=384, out_features=256)
    ref_d = st_models.Dense(in_features=384, out_features=256)
    assert ours_d.get_sentence_embedding_dimension() == ref_d.get_embedding_dimension() == 256
    assert ours_d.get_config_dict() == ref_d.get_config_dict()
    assert set(ours_d.state_dict()) == set(ref_d.state_dict())


@pytest.fixture(scope="module")
def st_dense_folder(tmp_path_factory):
    """A folder sentence-transformers saved: MiniLM, mean pooling, Dense 384->256 Tanh (seeded random init),
    Normalize; and the same model saved with ``safe_serialization=False`` (Dense in pytorch_model.bin)."""
    torch.manual_seed(0)
    model = st.SentenceTransformer(
        modules=[
            st_models.Transformer(MINILM, max_seq_length=128),
            st_models.Pooling(384, pooling_mode="mean"),
            st_models.Dense(384, 256, activation_function=nn.Tanh()),
            st_models.Normalize(),
        ],
        device="cpu",
    )
    root = tmp_path_factory.mktemp("st-dense")
    model.save(str(root / "safetensors"))
    model.save(str(root / "bin"), safe_serialization=False)
    assert (root / "bin" / "2_Dense" / "pytorch_model.bin").is_file()
    return root


@pytest.mark.parametrize("kind", ["safetensors", "bin"])
def test_dense_folder_of_sentence_transformers_round_trips(kind, st_dense_folder, texts, tmp_path):
    """sentence-transformers' Dense folder: bertkit's SentenceTransformer and pipeline("sentence-embedding")
    give its vectors; bertkit's saved folder has the same module files and loads back in
    sentence-transformers with the same vectors; bf16 and int8 still run (the Dense in fp32)."""
    folder = st_dense_folder / kind
    ref = st.SentenceTransformer(str(folder), device="cpu")
    want = ref.encode(texts)
    ours = SentenceTransformer(str(folder), device="cpu")
    assert ours.get_sentence_embedding_dimension() == 256
    np.testing.assert_allclose(ours.encode(texts), want, atol=ATOL, rtol=0)
    piped = np.asarray(pipeline("sentence-embedding", model=folder, dtype="fp32")(texts))
    np.testing.assert_allclose(piped, want, atol=ATOL, rtol=0)

    ours.save(str(tmp_path / "bk"))
    assert json.loads((tmp_path / "bk" / "2_Dense" / "config.json").read_text()) == json.loads(
        (st_dense_folder / "safetensors" / "2_Dense" / "config.json").read_text()
    )
    back = st.SentenceTransformer(str(tmp_path / "bk"), device="cpu")
    assert [type(m).__name__ for m in back] == [type(m).__name__ for m in ref]
    np.testing.assert_allclose(back.encode(texts), want, atol=ATOL, rtol=0)

    for dtype in ("bf16", "int8"):
        low = SentenceTransformer(str(folder), device="cpu", dtype=dtype)
        cos = (low.encode(texts) * want).sum(1)  # both unit length
        assert cos.min() > 0.99, (dtype, cos.min())
        assert low.dense[0].linear.weight.dtype == torch.float32


def test_fit_trains_the_dense_as_hand_written_adamw_steps(lee, tmp_path):
    """Two fit steps of a modules=[Transformer, Pooling, Dense, Normalize] model (batches in order, no warmup:
    the rate at step 1 is lr, at step 2 lr/2) move the Dense and the encoder as two hand-written steps on
    sentence-transformers' model built from the same modules: its CoSENTLoss, torch's AdamW over its two
    parameter groups (weight decay 0.01, none on biases and LayerNorm), clipping to norm 1. The saved
    folder loads in sentence-transformers with bertkit's vectors."""
    folder = tmp_path / "minilm-no-dropout"
    shutil.copytree(asset_path("minilm"), folder)
    folder = without_dropout(folder)  # dropout masks cannot be matched across libraries
    rows = lee[::23][:16]
    lr = 5e-5
    w, b = _init(128, 384, seed=7)

    def build(lib):
        tf = lib.Transformer(folder, max_seq_length=32)
        dense = lib.Dense(384, 128, activation_function=nn.Tanh(), init_weight=w.clone(), init_bias=b.clone())
        return [tf, lib.Pooling(384, pooling_mode="mean"), dense, lib.Normalize()]

    ref = st.SentenceTransformer(modules=build(st_models), device="cpu")
    ref.train()
    enc, ref_dense = ref[0].auto_model, ref[2]
    reference_cosent_steps(ref, rows, lr)

    ours = SentenceTransformer(modules=build(models), device="cpu")
    examples = [InputExample(texts=[a, b], label=s) for a, b, s in rows]
    ours.fit(
        [(DataLoader(examples, shuffle=False, batch_size=8), losses.CoSENTLoss(ours))],
        warmup_steps=0,
        optimizer_params={"lr": lr},
        show_progress_bar=False,
        output_path=str(tmp_path / "out"),
    )
    pairs = [("linear.weight", w), ("linear.bias", b)]
    got_dense = dict(ours.dense[0].named_parameters())
    want_dense = dict(ref_dense.named_parameters())
    for name, start in pairs:
        want_delta, got_delta = want_dense[name].detach() - start, got_dense[name].detach() - start
        assert float(got_delta.norm()) > 0, name  # fit moved the Dense
        err = float((got_delta - want_delta).norm()) / float(want_delta.norm())
        assert err < 2e-3, (name, err)
    stack = ours.training_model
    assert stack.dense[0] is ours.dense[0]  # the module fit trained is the one encode() runs
    start = dict(st.SentenceTransformer(folder, device="cpu")[0].auto_model.named_parameters())
    got = dict(stack.encoder.named_parameters())
    for name in ("encoder.layer.0.attention.self.query.weight", "encoder.layer.5.output.dense.weight"):
        want_delta = dict(enc.named_parameters())[name].detach() - start[name].detach()
        got_delta = got[name].detach() - start[name].detach()
        err = float((got_delta - want_delta).norm()) / float(want_delta.norm())
        assert err < 2e-3, (name, err)
    texts = [r[0] for r in rows[:4]]
    ref.eval()
    np.testing.assert_allclose(ours.encode(texts), ref.encode(texts), atol=1e-4, rtol=0)
    back = st.SentenceTransformer(str(tmp_path / "out"), device="cpu")
    np.testing.assert_allclose(back.encode(texts), ours.encode(texts), atol=ATOL, rtol=0)


def _dense_folder(tmp_path, st_dense_folder, edit_config=None, edit_modules=None):
    folder = tmp_path / "edited"
    shutil.copytree(st_dense_folder / "safetensors", folder)
    if edit_config is not None:
        path = folder / "2_Dense" / "config.json"
        path.write_text(json.dumps(edit_config(json.loads(path.read_text()))))
    if edit_modules is not None:
        path = folder / "modules.json"
        path.write_text(json.dumps(edit_modules(json.loads(path.read_text()))))
    return folder


def test_what_bertkit_cannot_compute_is_refused_by_name(st_dense_folder, tmp_path):
    """One clear line naming the value: an unknown activation (in code and in a folder), a Dense whose
    in_features do not match the vectors before it, a module kind bertkit cannot run, several pooling modes,
    modules out of order, a Pooling wider than the Transformer."""
    tf = models.Transformer(MINILM)
    pool = models.Pooling(384)
    with pytest.raises(ValueError, match=r"activation_function LeakyReLU\(negative_slope=0.01\) is not supported"):
        models.Dense(384, 64, activation_function=nn.LeakyReLU())
    with pytest.raises(ValueError, match="activation_function <built-in method tanh"):
        models.Dense(384, 64, activation_function=torch.tanh)

    def softplus(cfg):
        return {**cfg, "activation_function": "torch.nn.modules.activation.Softplus"}

    with pytest.raises(ValueError, match="activation_function 'torch.nn.modules.activation.Softplus' is not supported"):
        SentenceTransformer(str(_dense_folder(tmp_path, st_dense_folder, edit_config=softplus)))
    with pytest.raises(ValueError, match="Dense 0 has in_features=300, but the vectors before it have 384"):
        SentenceTransformer(modules=[tf, pool, models.Dense(300, 64)])
    with pytest.raises(ValueError, match="Dense 1 has in_features=32, but the vectors before it have 64"):
        SentenceTransformer(modules=[tf, pool, models.Dense(384, 64), models.Dense(32, 8)])

    def wider(cfg):
        return {**cfg, "in_features": 512}

    with pytest.raises(ValueError, match="2_Dense/model.safetensors: linear.weight has shape"):
        SentenceTransformer(str(_dense_folder(tmp_path / "w", st_dense_folder, edit_config=wider)))
    with pytest.raises(
        ValueError, match=r"modules\[2\] \(sentence_transformers\..*Dense\) is not a module bertkit runs"
    ):
        SentenceTransformer(modules=[tf, pool, st_models.Dense(384, 64)])
    with pytest.raises(ValueError, match=r"modules\[2\] \(bertkit.models.Pooling\) is out of place"):
        SentenceTransformer(modules=[tf, pool, models.Pooling(384), models.Normalize()])
    with pytest.raises(ValueError, match=r"pooling_mode \[\] names no mode"):
        models.Pooling(384, pooling_mode=[])
    with pytest.raises(ValueError, match="pooling_mode 'median' is not one of"):
        models.Pooling(384, pooling_mode=("mean", "median"))
    with pytest.raises(ValueError, match="pooling_mode 'median' is not one of"):
        models.Pooling(384, pooling_mode="median")
    with pytest.raises(ValueError, match="modules have no models.Pooling after the Transformer"):
        SentenceTransformer(modules=[tf])  # sentence-transformers 6.2 has no sentence_embedding to give
    with pytest.raises(ValueError, match="Pooling embedding_dimension=768 does not match the Transformer's 384"):
        SentenceTransformer(modules=[tf, models.Pooling(768)])

    def normalize_first(mods):
        return [mods[0], mods[1], mods[3], mods[2]]

    with pytest.raises(ValueError, match="order Transformer, Pooling, Normalize, Dense; bertkit runs a Dense only"):
        SentenceTransformer(str(_dense_folder(tmp_path / "o", st_dense_folder, edit_modules=normalize_first)))

    def layer_pooling(mods):
        return [
            *mods,
            {"idx": 4, "name": "4", "path": "4_X", "type": "sentence_transformers.models.WeightedLayerPooling"},
        ]

    with pytest.raises(ValueError, match="also has WeightedLayerPooling; its vectors would differ"):
        SentenceTransformer(str(_dense_folder(tmp_path / "k", st_dense_folder, edit_modules=layer_pooling)))
