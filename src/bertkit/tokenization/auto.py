"""Which bertkit tokenizer a saved folder needs, as transformers' AutoTokenizer decides it: the
``tokenizer_class`` a config names (mapped by :data:`TOKENIZER_CLASSES`), else the model type's
tokenizer, else what the files imply (tokenizer.json's model type, ``vocab.txt``, ``vocab.json`` +
``merges.txt``, a SentencePiece ``.model``). The model registry asks :func:`class_name_from_files`."""

from __future__ import annotations

from pathlib import Path

from .tokenizer_json import read_spec

# transformers' tokenizer_class -> bertkit class (None: the class follows tokenizer.json's model)
TOKENIZER_CLASSES: dict[str, str | None] = {
    "BertTokenizer": "BertTokenizer",
    "BertTokenizerFast": "BertTokenizer",
    "GPT2Tokenizer": "GPT2Tokenizer",
    "GPT2TokenizerFast": "GPT2Tokenizer",
    "RobertaTokenizer": "RobertaTokenizer",
    "RobertaTokenizerFast": "RobertaTokenizer",
    "XLMRobertaTokenizer": "XLMRobertaTokenizer",
    "XLMRobertaTokenizerFast": "XLMRobertaTokenizer",
    "PreTrainedTokenizerFast": None,  # ModernBERT's folders name this generic class
    "TokenizersBackend": None,
    "ByteLevelBPETokenizer": "ByteLevelBPETokenizer",
    "UnigramTokenizer": "UnigramTokenizer",
}

# tokenizer.json's model type -> the generic bertkit class for it
_BY_MODEL = {"WordPiece": "BertTokenizer", "BPE": "ByteLevelBPETokenizer", "Unigram": "UnigramTokenizer"}


def class_name_from_files(folder: Path) -> str | None:
    """The bertkit tokenizer class the folder's files imply; None when it holds no tokenizer files. A
    tokenizer.json whose model bertkit does not read raises a one-line error naming it."""
    tj = folder / "tokenizer.json"
    if tj.is_file():
        return _BY_MODEL[read_spec(tj)["model"]["type"]]
    if (folder / "vocab.txt").is_file():
        return "BertTokenizer"
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        return "GPT2Tokenizer"
    if any(folder.glob("*.model")):
        return "UnigramTokenizer"
    return None


def class_name_for(folder: Path, tokenizer_class: str | None) -> str | None:
    """The bertkit class for a folder whose config names ``tokenizer_class`` (None: it names none)."""
    if tokenizer_class in TOKENIZER_CLASSES:
        return TOKENIZER_CLASSES[tokenizer_class] or class_name_from_files(folder) or tokenizer_class
    return tokenizer_class
