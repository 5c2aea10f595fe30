"""More of transformers' ``generate`` calls on GPT-2, each checked token for token against transformers
with the same weights: beam search and ``bad_words_ids``.

The model is a tiny random GPT-2 saved by transformers and loaded by bertkit; its vocabulary is small
so that end-of-text tokens and banned words come up within a few steps.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from bertkit.modeling.gpt2 import GPT2LMHeadModel

SCORE_TOL = 1e-5  # log-prob sums of a few steps, fp32


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(transformers model, bertkit model, folder) on the same random weights."""
    folder = tmp_path_factory.mktemp("gpt2-tiny")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=64, bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    ref.save_pretrained(folder)
    return ref, GPT2LMHeadModel.from_pretrained(folder), folder


@pytest.fixture(scope="module")
def prompts():
    """One prompt of 7 tokens, and a batch of it with a 4-token prompt left-padded with the pad id 0."""
    ids = torch.randint(3, 50, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0
    return {"single": {"input_ids": ids[:1]}, "batch": {"input_ids": ids, "attention_mask": mask}}


BEAM_SETTINGS = [
    {"num_beams": 3},
    {"num_beams": 4, "num_return_sequences": 2, "length_penalty": 0.5},
    {"num_beams": 3, "early_stopping": True, "eos_token_id": 7},
    {"num_beams": 3, "early_stopping": "never", "length_penalty": 2.0, "eos_token_id": [7, 11]},
    {"num_beams": 5, "repetition_penalty": 1.3, "no_repeat_ngram_size": 2},
    {"num_beams": 3, "min_new_tokens": 4, "eos_token_id": 7},
    {"num_beams": 2, "max_length": 15},
]


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("settings", BEAM_SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_beam_search_equals_transformers(pair, prompts, settings, use_cache):
    ref, ours, _ = pair
    kw = {"max_new_tokens": 12, **settings} if "max_length" not in settings else dict(settings)
    for inputs in prompts.values():
        want = ref.generate(**inputs, **kw, do_sample=False, use_cache=use_cache)
        got = ours.generate(**inputs, **kw, use_cache=use_cache)
        assert got.shape == want.shape
        assert torch.equal(got, want)


def test_beams_that_end_early_are_padded_as_in_transformers(pair, prompts):
    """An EOS that the beams reach, with a length penalty that favours short hypotheses: finished beams
    end there and the rest of their row is filled as transformers fills it, with the pad id (49 here),
    or with EOS when the pad id is 0, which transformers' beam search reads as unset."""
    ref, ours, _ = pair
    inputs = prompts["batch"]
    free = ours.generate(**inputs, num_beams=3, max_new_tokens=12, eos_token_id=49)
    eos = int(free[0, 7])  # the first new token of the best beam of the first prompt
    kw = {"num_beams": 3, "num_return_sequences": 3, "max_new_tokens": 12, "eos_token_id": eos, "length_penalty": -1.0}
    for pad in (49, 0):
        got = ours.generate(**inputs, **kw, pad_token_id=pad)
        want = ref.generate(**inputs, **kw, pad_token_id=pad, do_sample=False)
        assert torch.equal(got, want)
    got = ours.generate(**inputs, **kw, pad_token_id=49)
    new = got[:, 7:].tolist()
    ended = [row.index(eos) for row in new if eos in row]
    assert ended and min(ended) < 11  # a beam did end before the last step...
    row = next(r for r in new if eos in r and r.index(eos) < 11)
    assert set(row[row.index(eos) + 1 :]) == {49}  # ...and the rest of its row is padding


def test_beam_search_dict_output_equals_transformers(pair, prompts):
    ref, ours, _ = pair
    kw = {
        "num_beams": 3,
        "num_return_sequences": 2,
        "max_new_tokens": 10,
        "eos_token_id": 7,
        "return_dict_in_generate": True,
        "output_scores": True,
        "output_logits": True,
    }
    got = ours.generate(**prompts["batch"], **kw)
    want = ref.generate(**prompts["batch"], **kw, do_sample=False)
    assert torch.equal(got.sequences, want.sequences)
    assert torch.equal(got.beam_indices.long(), want.beam_indices.long())
    assert (got.sequences_scores - want.sequences_scores).abs().max() < SCORE_TOL
    assert len(got.scores) == len(want.scores) and len(got.logits) == len(want.logits)
    for mine, theirs in zip(got.scores + got.logits, want.scores + want.logits):
        finite = torch.isfinite(theirs)
        assert torch.equal(finite, torch.isfinite(mine))
        assert (mine[finite] - theirs[finite]).abs().max() < SCORE_TOL
    plain = ours.generate(**prompts["batch"], num_beams=3, max_new_tokens=10, return_dict_in_generate=True)
    assert plain.sequences_scores is None  # as transformers: only with output_scores


def test_num_beams_from_generation_config_json(pair, prompts, tmp_path):
    """A folder whose generation_config.json asks for beams searches with them, as transformers does."""
    import json
    import shutil

    _, _, folder = pair
    shutil.copytree(folder, tmp_path / "m")
    settings = {"num_beams": 4, "length_penalty": 0.7, "max_new_tokens": 9, "eos_token_id": 7, "pad_token_id": 0}
    (tmp_path / "m" / "generation_config.json").write_text(json.dumps(settings))
    ref = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "m").eval()
    ours = GPT2LMHeadModel.from_pretrained(tmp_path / "m")
    for inputs in prompts.values():
        assert torch.equal(ours.generate(**inputs), ref.generate(**inputs))
        assert torch.equal(ours.generate(**inputs, num_beams=1), ref.generate(**inputs, num_beams=1))


def test_beam_search_refusals_name_the_argument(pair, prompts):
    _, ours, _ = pair
    ids = prompts["single"]["input_ids"]
    for kw, text in [
        ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences=3 must be <= num_beams=2"),
        ({"num_beams": 0}, "num_beams must be an integer >= 1, got 0"),
        ({"num_beams": 2.0}, "num_beams must be an integer >= 1, got 2.0"),
        ({"num_beams": 2, "early_stopping": "sometimes"}, "early_stopping must be True, False or 'never'"),
        ({"num_beams": 2, "length_penalty": "long"}, "length_penalty must be a number, got 'long'"),
        ({"num_beams": 2, "streamer": object()}, "streamer cannot be used with beam search"),
    ]:
        with pytest.raises(ValueError, match=text):
            ours.generate(ids, max_new_tokens=3, **kw)


BAD_WORDS = [[14], [35], [2], [28, 14, 27], [15, 31, 22], [3, 3]]


def test_bad_words_ids_greedy_and_beams_equal_transformers(pair, prompts):
    """Single tokens and sequences are banned as in transformers (a single EOS entry is kept allowed)."""
    ref, ours, _ = pair
    for inputs in prompts.values():
        free = ours.generate(**inputs, max_new_tokens=20)
        for kw in ({}, {"num_beams": 3}, {"num_beams": 3, "num_return_sequences": 3, "eos_token_id": 7}):
            got = ours.generate(**inputs, max_new_tokens=20, bad_words_ids=BAD_WORDS, **kw)
            want = ref.generate(**inputs, max_new_tokens=20, bad_words_ids=BAD_WORDS, do_sample=False, **kw)
            assert torch.equal(got, want)
        banned = ours.generate(**inputs, max_new_tokens=20, bad_words_ids=BAD_WORDS)
        assert not torch.equal(banned, free)  # the ban changed the greedy continuation
        assert not (banned[:, inputs["input_ids"].shape[1] :] == 14).any()


def test_bad_words_ids_sampling_equals_transformers_with_the_same_seed(pair, prompts):
    ref, ours, _ = pair
    kw = {"max_new_tokens": 15, "bad_words_ids": BAD_WORDS, "do_sample": True, "top_k": 5, "temperature": 0.8}
    for seed in (0, 1):
        torch.manual_seed(seed)
        got = ours.generate(**prompts["batch"], **kw)
        torch.manual_seed(seed)
        want = ref.generate(**prompts["batch"], **kw)
        assert torch.equal(got, want)


def test_bad_words_ids_bad_input_is_one_line(pair, prompts):
    _, ours, _ = pair
    ids = prompts["single"]["input_ids"]
    for bad, text in [
        ([], "bad_words_ids must be a non-empty list"),
        ([5], "bad_words_ids must be a list of token-id lists, got the item 5"),
        ([[5], []], "non-empty lists of token ids in \\[0, 50\\), got \\[\\]"),
        ([[50]], "got \\[50\\]"),
        ([[-1]], "got \\[-1\\]"),
    ]:
        with pytest.raises(ValueError, match=text):
            ours.generate(ids, max_new_tokens=3, bad_words_ids=bad)


# ---------------------------------------------------------------------------------------- pipeline


@pytest.fixture(scope="module")
def chinese_folder(tmp_path_factory):
    """A GPT-2 with a BertTokenizer (the Chinese vocabulary), as uer's models are laid out."""
    import shutil

    from bertkit.assets import asset_path

    folder = tmp_path_factory.mktemp("gpt2-zh")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=21128, n_positions=128, tokenizer_class="BertTokenizer"
    )
    transformers.GPT2LMHeadModel(cfg).save_pretrained(folder)
    shutil.copy(asset_path("vocab-chinese"), folder / "vocab.txt")
    return folder


def _with_generation_config(folder, tmp_path, settings):
    import json
    import shutil

    out = tmp_path / "m"
    shutil.copytree(folder, out)
    (out / "generation_config.json").write_text(json.dumps(settings))
    return out


def test_text_generation_pipeline_reads_generation_config_json(chinese_folder, tmp_path):
    """The folder's generation_config.json gives the pipeline its defaults (greedy, 6 new tokens, an
    EOS and a pad id of its own); the call's arguments win, as in transformers' pipeline."""
    from bertkit import pipeline
    from bertkit.pipelines.text_generation import join_cjk

    free = transformers.pipeline("text-generation", model=str(chinese_folder), device="cpu")
    prompt = "今天天气真好啊"
    ids = free.tokenizer(prompt, return_tensors="pt")["input_ids"]
    greedy = free.model.generate(ids, max_new_tokens=6, do_sample=False)
    eos = int(greedy[0, ids.shape[1] + 2])  # the third new token ends the text
    settings = {"do_sample": False, "max_new_tokens": 6, "eos_token_id": eos, "pad_token_id": 103}
    folder = _with_generation_config(chinese_folder, tmp_path, settings)
    ours = pipeline("text-generation", model=str(folder))
    theirs = transformers.pipeline("text-generation", model=str(folder), device="cpu")
    for kw in ({}, {"max_new_tokens": 3}, {"max_length": 12}, {"eos_token_id": 49}, {"num_beams": 2}):
        a, b = ours(prompt, **kw), theirs(prompt, **kw)
        assert [r["generated_text"] for r in a] == [join_cjk(r["generated_text"]) for r in b], kw
    short = ours(prompt, return_full_text=False)[0]["generated_text"]
    assert 0 < len(short) <= 3  # stopped at the folder's EOS (decoded without special tokens)
    for seed in (0, 1):  # the call turns sampling back on: the pipeline's temperature 0.7 applies
        torch.manual_seed(seed)
        a = ours(prompt, do_sample=True, top_k=10)
        torch.manual_seed(seed)
        b = theirs(prompt, do_sample=True, top_k=10)
        assert a[0]["generated_text"] == join_cjk(b[0]["generated_text"])


def test_the_cache_under_transformers_newer_name(pair, prompts):
    """transformers 5 passes and returns the KV cache as ``cache`` (``past_key_values`` is its former
    name): a loop written that way continues a prompt with the logits of transformers' own loop."""
    ref, ours, _ = pair
    ids = prompts["single"]["input_ids"]
    with torch.no_grad():
        want, got = ref(ids[:, :4], use_cache=True), ours(ids[:, :4], use_cache=True)
        for t in range(4, ids.shape[1]):
            # attribute and key alike, as transformers' outputs answer both
            want = ref(ids[:, t : t + 1], cache=want["cache"] if t % 2 else want.cache, use_cache=True)
            got = ours(ids[:, t : t + 1], cache=got["cache"] if t % 2 else got.cache, use_cache=True)
            torch.testing.assert_close(got.logits, want.logits, atol=1e-5, rtol=1e-4)
        whole = ref(ids).logits[:, -1:]
        torch.testing.assert_close(got.logits, whole, atol=1e-5, rtol=1e-4)  # the cache was used, not ignored
        assert ours.transformer(ids[:, :2], use_cache=True).cache is not None
        with pytest.raises(TypeError, match="past_key_values= or as cache="):
            ours(ids[:, 5:6], cache=got.cache, past_key_values=got.cache)
