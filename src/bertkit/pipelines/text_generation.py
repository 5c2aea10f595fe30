"""``pipeline("text-generation")``: continue a prompt with a causal LM, answering like transformers.

::

    generator = pipeline("text-generation", model="runs/gpt2-zh")
    generator("今天天气真好啊", max_length=50, num_return_sequences=1)
    # [{'generated_text': '今天天气真好啊...'}]

Defaults are, as in transformers' pipeline: the call's arguments, then what the model's
``generation_config.json`` sets, then the pipeline's own: sampling at temperature 0.7, up to 256 new
tokens (fewer when the model's context is shorter) and the tokenizer's pad id. The prompt is
tokenized with the tokenizer's defaults (a BertTokenizer adds ``[CLS]``/``[SEP]``, as transformers
does), new tokens are decoded without special tokens and appended to the prompt text. With a
BertTokenizer the spaces that WordPiece decoding puts between Chinese characters are dropped, since
Chinese is written without them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .pipelines import Pipeline, _batched

__all__ = ["TextGenerationPipeline", "TextStreamer", "generate_text", "join_cjk"]

# CJK ideographs, CJK punctuation and full-width forms: no space belongs next to these in Chinese text.
_CJK = r"\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_CJK_SPACE = re.compile(rf"(?<=[{_CJK}]) +| +(?=[{_CJK}])")

_DEFAULT_MAX_NEW_TOKENS = 256
_DEFAULT_TEMPERATURE = 0.7


def join_cjk(text: str) -> str:
    """Drop the spaces WordPiece decoding puts next to Chinese characters: '今 天 好' -> '今天好'."""
    return _CJK_SPACE.sub("", text)


_INT_ARGS = ("max_length", "max_new_tokens", "num_return_sequences", "top_k", "no_repeat_ngram_size")
_FLOAT_ARGS = ("temperature", "top_p", "repetition_penalty")


def _check_generation_numbers(**kwargs: Any) -> None:
    """Integer arguments must be ints and real ones real numbers (a ValueError naming the argument);
    their ranges are checked by ``generate``."""
    for name in _INT_ARGS:
        v = kwargs.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ValueError(f"{name} must be an integer, got {v!r}")
    for name in _FLOAT_ARGS:
        v = kwargs.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ValueError(f"{name} must be a number, got {v!r}")


class TextGenerationPipeline(Pipeline):
    """``generator(prompt, max_length=..., num_return_sequences=...)`` -> ``[{'generated_text': ...}]``."""

    model_task = "causal-lm"

    def __init__(self, model: Any, tokenizer: Any = None, **kwargs: Any) -> None:
        super().__init__(model, tokenizer=tokenizer, **kwargs)
        can = getattr(self.model, "can_generate", None)
        if not (callable(can) and can()):
            from bertkit.modeling.registry import family

            fam = family(self.model.config.model_type)
            raise ValueError(f"{type(self.model).__name__} cannot generate text: {fam.why_missing('causal-lm')}")

    def _set_generation_params(self, generation_config: Any = None) -> dict[str, Any]:
        """The fields the model's generation config (and a passed ``generation_config``) set, to any
        value: what the pipeline's own defaults must not override."""
        from bertkit.modeling.generation import GenerationConfig

        model = self.model
        found = model.__dict__.get("_generation_config") or GenerationConfig.from_model_config(model.config)
        fields = dict(found.to_dict())
        if generation_config is not None:
            fields.update(generation_config.to_dict())
        return {k: v for k, v in fields.items() if v is not None}

    def __call__(
        self,
        text_inputs: str | Sequence[str],
        max_length: int | None = None,
        max_new_tokens: int | None = None,
        num_return_sequences: int | None = None,
        do_sample: bool | None = None,
        temperature: float | None = None,
        return_full_text: bool = True,
        add_special_tokens: bool | None = None,
        truncation: bool = False,
        streamer: Any = None,
        **generate_kwargs: Any,
    ) -> list[dict[str, str]] | list[list[dict[str, str]]]:
        """Generate for one prompt (a list of dicts) or several (a list of such lists).

        An argument left out takes the model's generation config value, else the pipeline's default."""
        _check_generation_numbers(
            max_length=max_length,
            max_new_tokens=max_new_tokens,
            num_return_sequences=num_return_sequences,
            temperature=temperature,
            **generate_kwargs,
        )
        given = {
            "max_length": max_length,
            "max_new_tokens": max_new_tokens,
            "do_sample": do_sample,
            "temperature": temperature,
        }
        given = {k: v for k, v in given.items() if v is not None}
        settings = {**self._set_generation_params(generate_kwargs.get("generation_config")), **given}
        do_sample = bool(settings.get("do_sample", True))
        # greedy search never reads the temperature: any value (0 included) means the same
        temperature = settings.get("temperature", _DEFAULT_TEMPERATURE) if do_sample else 1.0
        max_new_tokens, max_length = settings.get("max_new_tokens"), settings.get("max_length")
        if "pad_token_id" not in generate_kwargs and "pad_token_id" not in settings:
            generate_kwargs["pad_token_id"] = self.tokenizer.pad_token_id
        prompts, batched = _batched(text_inputs)
        tok = self.tokenizer
        join = type(tok).__name__ == "BertTokenizer"
        limit = self.model.max_positions
        results = []
        for prompt in prompts:
            if not isinstance(prompt, str):
                raise TypeError(f"text-generation takes a string or a list of strings, got {type(prompt).__name__}")
            kwargs = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
            ids = tok(prompt, return_tensors="pt", **kwargs)["input_ids"].to(self.device)
            if ids.shape[-1] == 0:
                raise ValueError(
                    "the prompt has no tokens, so there is nothing to continue: give some text "
                    "(or keep add_special_tokens on, so the tokenizer's start token begins it)"
                )
            new = max_new_tokens
            if new is None:
                new = (
                    max_length - ids.shape[1]
                    if max_length is not None
                    else max(1, min(_DEFAULT_MAX_NEW_TOKENS, limit - ids.shape[1]))
                )
                if new < 1:
                    raise ValueError(
                        f"the prompt has {ids.shape[1]} tokens and max_length={max_length} leaves no "
                        "room for new ones; raise max_length or pass max_new_tokens"
                    )
            if truncation and ids.shape[1] + new > limit and new < limit:
                ids = ids[:, -(limit - new) :]  # keep the end of the prompt, where generation continues
            out = self.model.generate(
                ids,
                max_new_tokens=new,
                num_return_sequences=num_return_sequences,
                do_sample=do_sample,
                temperature=temperature,
                truncation=truncation,
                streamer=streamer,
                **generate_kwargs,
            )
            prompt_len = ids.shape[1]
            rows = []
            for seq in out.tolist():
                text = tok.decode(seq[prompt_len:], skip_special_tokens=True)
                if join:
                    text = join_cjk(text)
                rows.append({"generated_text": prompt + text if return_full_text else text})
            results.append(rows)
        return results if batched else results[0]


class TextStreamer:
    """Writes the text of each new token as soon as ``generate`` produces it (one sequence).

    WordPiece pieces only become text in context (``##`` joins a word, spaces depend on neighbours),
    so the decoded text of all new tokens is recomputed and only its unseen tail is written.
    """

    def __init__(self, tokenizer: Any, write: Any, join_chinese: bool = False):
        self.tokenizer = tokenizer
        self.write = write
        self.join_chinese = join_chinese
        self.ids: list[int] = []
        self.shown = ""

    def _text(self) -> str:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        return join_cjk(text) if self.join_chinese else text

    def put(self, value: Any) -> None:
        """Take the (1,) tensor of the step's new token and write the text it adds."""
        self.ids.extend(int(v) for v in value.reshape(-1).tolist())
        text = self._text()
        # A new piece may change how earlier pieces render ("un" + "##able"): write only what is stable.
        common = len(self.shown)
        if not text.startswith(self.shown):
            common = next((i for i, (a, b) in enumerate(zip(text, self.shown)) if a != b), min(len(text), common))
        if len(text) > common:
            self.write(text[common:])
        self.shown = text

    def end(self) -> None:
        self.write("\n")


def generate_text(
    model: Any, prompt: str, write: Any = None, tokenizer: Any = None, device: str | None = None, **generate_kwargs: Any
) -> str:
    """Continue ``prompt`` with the causal LM in folder ``model``; stream pieces to ``write`` as they come.

    ``generate_kwargs`` are ``generate()``'s (max_new_tokens, do_sample, top_p, ...). Returns the full text.
    """
    pipe = TextGenerationPipeline(model, tokenizer=tokenizer, device=device)
    join = type(pipe.tokenizer).__name__ == "BertTokenizer"
    streamer = None
    if write is not None:
        pending = [prompt]

        def write_after_prompt(text: str) -> None:
            # the prompt goes out with the first new text: a prompt refused by generate() is not printed
            if pending:
                write(pending.pop())
            write(text)

        streamer = TextStreamer(pipe.tokenizer, write_after_prompt, join)
    generate_kwargs.setdefault("do_sample", False)
    generate_kwargs.setdefault("temperature", 1.0)
    return pipe(prompt, streamer=streamer, **generate_kwargs)[0]["generated_text"]
