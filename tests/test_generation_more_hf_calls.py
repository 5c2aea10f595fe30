"""transformers' ``generate`` calls beyond greedy search and beam search, each checked token for token
against transformers with the same weights, the same text prompts and the same seed: beam sampling,
``eos_token_id=None``, the score processors (min_length, forced EOS, suppressed tokens, min-p, typical-p,
epsilon and eta cutoffs...), the settings that are refused, and GPT-2's loss on a left-padded batch.

The model is a tiny random GPT-2 over the uncased BERT vocabulary; its weights are drawn wide
(initializer_range=1) so that each step has a few likely tokens, where the filters make a difference.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import transformers

from bertkit.assets import asset_path
from bertkit.modeling.gpt2 import GPT2LMHeadModel

SCORE_TOL = 1e-5  # absolute, and 1e-6 relative: the wide weights give log-probs near -30
TEXTS = ["It is a truth universally acknowledged, that a single man", "The weather today"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpt2-text")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=4,
        vocab_size=30522,
        n_positions=64,
        bos_token_id=101,
        eos_token_id=102,
        pad_token_id=0,
        initializer_range=1.0,
    )
    transformers.GPT2LMHeadModel(cfg).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def pair(folder):
    """(transformers model, bertkit model) on the same weights."""
    return transformers.GPT2LMHeadModel.from_pretrained(folder).eval(), GPT2LMHeadModel.from_pretrained(folder)


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.BertTokenizer(str(asset_path("vocab-uncased")))


@pytest.fixture(scope="module")
def prompts(tokenizer):
    """The first text alone, and both texts as a left-padded batch (the second padded with id 0)."""
    enc = tokenizer(TEXTS, padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")
    assert not enc["attention_mask"][1].all()
    single = tokenizer(TEXTS[:1], add_special_tokens=False, return_tensors="pt")["input_ids"]
    return {
        "single": {"input_ids": single},
        "batch": {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]},
    }


def _both(ref, ours, inputs, seed, **kw):
    torch.manual_seed(seed)
    want = ref.generate(**inputs, **{"do_sample": False, **kw})
    torch.manual_seed(seed)
    got = ours.generate(**inputs, **kw)
    return got, want


def _assert_same_scores(mine, theirs):
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        finite = torch.isfinite(b)
        assert torch.equal(finite, torch.isfinite(a))
        torch.testing.assert_close(a[finite], b[finite], atol=SCORE_TOL, rtol=1e-6)


# ---------------------------------------------------------------------------------------- beam sampling

BEAM_SAMPLING = [
    {"num_beams": 3},
    {"num_beams": 4, "num_return_sequences": 2, "eos_token_id": 102},
    {"num_beams": 3, "top_k": 4, "temperature": 0.7},
    {"num_beams": 3, "top_p": 0.7, "length_penalty": 0.5, "early_stopping": True},
    # top-k keeps 3 tokens a beam (the EOS ids plus one), so the 6 drawn are nearly all there are
    {"num_beams": 2, "top_k": 1, "eos_token_id": [102, 1996]},
    {"num_beams": 3, "repetition_penalty": 1.3, "no_repeat_ngram_size": 2, "min_new_tokens": 3},
]


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("settings", BEAM_SAMPLING, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_beam_sampling_draws_what_transformers_draws(pair, prompts, settings, use_cache):
    """do_sample=True with beams draws each step's candidates from the same random stream as
    transformers: with one seed the sequences are the same, another seed gives other ones."""
    ref, ours = pair
    kw = {"max_new_tokens": 8, "do_sample": True, "use_cache": use_cache, **settings}
    for inputs in prompts.values():
        runs = []
        for seed in (0, 1, 2):
            got, want = _both(ref, ours, inputs, seed, **kw)
            assert got.shape == want.shape and torch.equal(got, want), seed
            runs.append(got)
        if settings.get("top_k") != 1:
            assert any(not torch.equal(runs[0], r) for r in runs[1:])  # sampled, not searched


def test_beam_sampling_dict_output_equals_transformers(pair, prompts):
    ref, ours = pair
    kw = {
        "num_beams": 3,
        "num_return_sequences": 2,
        "max_new_tokens": 6,
        "do_sample": True,
        "top_k": 10,
        "return_dict_in_generate": True,
        "output_scores": True,
        "output_logits": True,
    }
    got, want = _both(ref, ours, prompts["batch"], 3, **kw)
    assert torch.equal(got.sequences, want.sequences)
    assert torch.equal(got.beam_indices.long(), want.beam_indices.long())
    torch.testing.assert_close(got.sequences_scores, want.sequences_scores, atol=SCORE_TOL, rtol=1e-6)
    _assert_same_scores(got.scores, want.scores)
    _assert_same_scores(got.logits, want.logits)
    searched = ours.generate(**prompts["batch"], **{**kw, "do_sample": False})
    assert not torch.equal(searched.sequences, got.sequences)


# ---------------------------------------------------------------------------------------- eos_token_id=None


@pytest.fixture(scope="module")
def eos_folder(folder, pair, prompts, tmp_path_factory):
    """The model with config.json's EOS set to the third token greedy search gives the first text, and no
    generation_config.json (both libraries then derive one from config.json)."""
    _, ours = pair
    ids = prompts["single"]["input_ids"]
    eos = int(ours.generate(ids, max_new_tokens=3, eos_token_id=None)[0, -1])
    out = tmp_path_factory.mktemp("gpt2-eos")
    shutil.copytree(folder, out, dirs_exist_ok=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    config = json.loads((out / "config.json").read_text())
    config["eos_token_id"] = eos
    (out / "config.json").write_text(json.dumps(config))
    return out, eos


def _load_both(path):
    return transformers.GPT2LMHeadModel.from_pretrained(path).eval(), GPT2LMHeadModel.from_pretrained(path)


def test_eos_token_id_none_in_the_call_runs_to_the_limit(eos_folder, prompts):
    """The model's EOS ends the text unless the call passes eos_token_id=None, which (as in transformers)
    means no end-of-text token: every row runs to max_new_tokens, and no finished row is padded."""
    path, eos = eos_folder
    ref, ours = _load_both(path)
    n = prompts["single"]["input_ids"].shape[1]
    for inputs in prompts.values():
        for kw in ({}, {"num_beams": 3}, {"do_sample": True, "top_k": 5}):
            stopped, want = _both(ref, ours, inputs, 0, max_new_tokens=10, **kw)
            assert torch.equal(stopped, want)
            free, want = _both(ref, ours, inputs, 0, max_new_tokens=10, eos_token_id=None, **kw)
            assert torch.equal(free, want)
            assert free.shape[1] == inputs["input_ids"].shape[1] + 10
        assert stopped.shape[1] < free.shape[1] or (stopped[:, n:] == 0).any()
    ids = prompts["single"]["input_ids"]
    assert int(ours.generate(ids, max_new_tokens=10)[0, -1]) == eos  # greedy stops on the model's EOS


def test_eos_none_in_generation_configs_reads_as_transformers(eos_folder, prompts, tmp_path):
    """A generation config given to the call that leaves eos_token_id unset takes the model's; the
    model's own generation config with eos_token_id None (set in memory, or a generation_config.json
    that does not name one) has no end-of-text token, whatever config.json says."""
    from bertkit.modeling.generation import GenerationConfig

    path, eos = eos_folder
    ref, ours = _load_both(path)
    ids = prompts["single"]["input_ids"]
    got = ours.generate(ids, generation_config=GenerationConfig(max_new_tokens=10))
    assert torch.equal(got, ref.generate(ids, generation_config=transformers.GenerationConfig(max_new_tokens=10)))
    assert int(got[0, -1]) == eos and got.shape[1] < ids.shape[1] + 10
    ref.generation_config.eos_token_id = None
    ours.generation_config.eos_token_id = None
    got = ours.generate(ids, max_new_tokens=10)
    assert torch.equal(got, ref.generate(ids, max_new_tokens=10)) and got.shape[1] == ids.shape[1] + 10
    shutil.copytree(path, tmp_path / "m")
    (tmp_path / "m" / "generation_config.json").write_text(json.dumps({"max_new_tokens": 10}))
    ref, ours = _load_both(tmp_path / "m")
    got = ours.generate(ids)
    assert torch.equal(got, ref.generate(ids)) and got.shape[1] == ids.shape[1] + 10


# ---------------------------------------------------------------------------------------- processors

PROCESSORS = [
    {"repetition_penalty": 1.5},
    {"no_repeat_ngram_size": 1},
    {"min_new_tokens": 6, "eos_token_id": "first"},
    {"min_length": 17, "eos_token_id": "first"},
    {"forced_eos_token_id": 102},
    {"num_beams": 3, "forced_eos_token_id": [102, 1996]},
    {"suppress_tokens": "first"},
    {"begin_suppress_tokens": "first"},
    {"exponential_decay_length_penalty": (2, 3.0), "eos_token_id": 102},
    {"renormalize_logits": True, "repetition_penalty": 1.2},
    {"do_sample": True, "min_p": 0.2},
    {"do_sample": True, "num_beams": 2, "min_p": 0.3},
    {"do_sample": True, "typical_p": 0.5},
    {"do_sample": True, "epsilon_cutoff": 0.05},
    {"do_sample": True, "eta_cutoff": 0.05},
    {"do_sample": True, "top_k": 0, "temperature": 1.5, "renormalize_logits": True},
    {"do_sample": True, "top_k": None},  # given as None: no top-k filter, where leaving it out keeps 50
    {"do_sample": True, "num_beams": 2, "top_k": 3, "renormalize_logits": True},
]


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("settings", PROCESSORS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_score_processors_equal_transformers(pair, prompts, settings, use_cache):
    """Sequences and every step's processed scores equal transformers' (with the same seed when
    sampling), and each setting changes them: it is applied, not ignored. "first" stands for the first
    token the model would produce without the setting."""
    ref, ours = pair
    base = {"max_new_tokens": 8, "use_cache": use_cache, "return_dict_in_generate": True, "output_scores": True}
    for name, inputs in prompts.items():
        plain = ours.generate(**inputs, **base, do_sample=settings.get("do_sample", False), num_beams=1)
        first = plain.sequences[0, inputs["input_ids"].shape[1]].item()
        kw = {k: ([first] if "suppress" in k else first) if v == "first" else v for k, v in settings.items()}
        for seed in (0, 1):
            got, want = _both(ref, ours, inputs, seed, **base, **kw)
            assert torch.equal(got.sequences, want.sequences), (name, seed)
            _assert_same_scores(got.scores, want.scores)
            torch.manual_seed(seed)
            without = ours.generate(
                **inputs, **base, **{k: v for k, v in kw.items() if k in ("do_sample", "num_beams")}
            )
            changed = not torch.equal(without.sequences, got.sequences) or any(
                not torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(without.scores, got.scores)
            )
            assert changed, (name, seed)


@pytest.mark.parametrize(
    ("kw", "text"),
    [
        ({"num_beams": 4, "num_beam_groups": 2}, r"num_beam_groups=2 \(diverse \(group\) beam search\)"),
        ({"num_beams": 4, "diversity_penalty": 0.5}, r"diversity_penalty=0.5 \(diverse"),
        ({"stop_strings": ["weather"]}, r"stop_strings=\['weather'\] \(stopping on strings"),
        ({"penalty_alpha": 0.6, "top_k": 4}, r"penalty_alpha=0.6 \(contrastive search\)"),
        ({"guidance_scale": 1.5}, r"guidance_scale=1.5 \(classifier-free guidance\)"),
        ({"forced_bos_token_id": 101}, r"forced_bos_token_id=101 \(forcing the first new token\)"),
        ({"min_p": 1.5, "do_sample": True}, r"min_p must be a number in \[0, 1\], got 1.5"),
        ({"typical_p": 0.0, "do_sample": True}, r"typical_p must be a number in \(0, 1\] \(1 = off\), got 0.0"),
        ({"min_length": -1}, r"min_length must be an integer >= 0, got -1"),
        ({"suppress_tokens": 5}, r"suppress_tokens must be a list of token ids, got 5"),
        ({"forced_eos_token_id": 40000}, r"forced_eos_token_id must be a token id or a non-empty list"),
        (
            {"exponential_decay_length_penalty": (2, 1.5), "eos_token_id": None},
            r"exponential_decay_length_penalty raises the EOS score: it needs an eos_token_id",
        ),
    ],
)
def test_unsupported_or_bad_settings_are_refused_in_one_line(pair, prompts, tokenizer, kw, text):
    _, ours = pair
    with pytest.raises(ValueError, match=text):
        ours.generate(**prompts["single"], max_new_tokens=3, tokenizer=tokenizer, **kw)


def test_settings_left_off_pass_and_a_config_that_turns_one_on_is_refused(pair, prompts, folder, tmp_path):
    """transformers' no-op values of settings not implemented here are accepted (a generation config
    carries them); a generation_config.json that turns one on is refused rather than ignored."""
    _, ours = pair
    ids = prompts["single"]["input_ids"]
    plain = ours.generate(ids, max_new_tokens=4)
    same = ours.generate(ids, max_new_tokens=4, num_beam_groups=1, diversity_penalty=0.0, stop_strings=None)
    assert torch.equal(plain, same)
    shutil.copytree(folder, tmp_path / "m")
    (tmp_path / "m" / "generation_config.json").write_text(json.dumps({"num_beams": 4, "num_beam_groups": 2}))
    model = GPT2LMHeadModel.from_pretrained(tmp_path / "m")
    with pytest.raises(ValueError, match=r"num_beam_groups=2 \(diverse"):
        model.generate(ids, max_new_tokens=3)


# ---------------------------------------------------------------------------------------- left-padded loss


def test_left_padded_batch_loss_equals_transformers_sdpa(folder, prompts):
    """On a left-padded batch with labels -100 at the pads, the logits of every token and the loss equal
    transformers' default attention (SDPA). The last pad's logits predict the first real token, so they
    count in the loss: SDPA answers a query that sees only padding with zeros, eager attention with an
    average over the pads, and the two losses differ; bertkit follows SDPA. Real tokens agree in all."""
    sdpa = transformers.GPT2LMHeadModel.from_pretrained(folder, attn_implementation="sdpa").eval()
    eager = transformers.GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    ours = GPT2LMHeadModel.from_pretrained(folder).eval()
    assert transformers.GPT2LMHeadModel.from_pretrained(folder).config._attn_implementation == "sdpa"
    batch = prompts["batch"]
    real = batch["attention_mask"].bool()
    labels = batch["input_ids"].masked_fill(~real, -100)
    with torch.no_grad():
        got = ours(**batch, labels=labels)
        want = sdpa(**batch, labels=labels)
        other = eager(**batch, labels=labels)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-5, rtol=1e-5)  # pads included
    assert abs(got.loss.item() - want.loss.item()) < 1e-6
    torch.testing.assert_close(got.logits[real], other.logits[real], atol=1e-4, rtol=1e-4)  # another kernel
    assert abs(other.loss.item() - want.loss.item()) > 1e-4  # the two implementations disagree
    got = ours(**batch, labels=labels, output_attentions=True)  # the explicit softmax: no NaN either
    assert torch.isfinite(got.logits).all()
    torch.testing.assert_close(got.loss, want.loss, atol=1e-5, rtol=1e-5)
