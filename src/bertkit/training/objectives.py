"""Pretraining objectives of `bertkit pretrain --objective`: ``mlm+nsp``, ``mlm`` and ``electra``.

* ``mlm+nsp``: BERT's recipe (:func:`bertkit.training.pretraining.build_pretraining` as it was), the
  output is ``BertForPreTraining``.
* ``mlm``: masked LM alone on contiguous full-length sequences, RoBERTa-style (no NSP); the output
  is ``BertForMaskedLM``.
* ``electra``: replaced-token detection (Clark et al. 2020). A generator, a smaller masked LM whose
  hidden size is ``generator_size`` times the discriminator's, shares the embeddings with the
  discriminator. The generator's samples replace the masked tokens and the discriminator predicts,
  for every real token, whether it was replaced. The loss is generator MLM + 50 x discriminator BCE;
  no gradient flows through the sampling. The run's folder holds the discriminator
  (``ElectraForPreTraining``, the model to fine-tune) and ``generator/`` the generator
  (``ElectraForMaskedLM``), each a folder transformers loads.

:func:`build_objective` gives the parts :func:`~bertkit.training.pretraining.pretrain` hands the
one Trainer: the model, the datasets, the collator, the ``loss_fn`` and the held-out evaluation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertkit import _args as A
from bertkit.modeling.outputs import ModelOutput
from bertkit.training.mlm import OBJECTIVES, check_objective_args
from bertkit.training.mlm import model_family as _folder_model_type
from bertkit.training.mlm import read_model_config as _read_config

__all__ = [
    "OBJECTIVES",
    "DISCRIMINATOR_WEIGHT",
    "ElectraPretrainingModel",
    "build_objective",
    "check_objective_args",
    "cls_bag_of_words_loss",
    "electra_loss",
    "evaluate_electra",
    "evaluate_mlm",
    "GENERATOR_SIZE",
    "generator_config",
    "generator_shape",
    "generator_size",
    "mlm_loss",
]

DISCRIMINATOR_WEIGHT = 50.0  # ELECTRA's lambda: the BCE is per token and far smaller than the MLM loss


def _check_model_folder(args: Any) -> None:
    """--model must be of the objective's family: ELECTRA for electra, BERT for the others."""
    if not args.model:
        return
    found = _folder_model_type(args.model)
    if args.objective == "electra" and found != "electra":
        raise ValueError(
            f"{A.flag('objective')} electra continues an ELECTRA model (model_type electra, the discriminator "
            f"folder of an earlier electra run); {A.given('model', str(args.model))} is a {found!r} model. Start a new "
            f"ELECTRA model with {A.flag('vocab')}, or pretrain this one with {A.flag('objective')} mlm"
        )
    if args.objective != "electra" and found not in ("bert", "modernbert"):
        raise ValueError(
            f"{A.given('objective', str(args.objective))} trains a BERT or ModernBERT model; "
            f"{A.given('model', str(args.model))} is a {found!r} "
            f"model" + (f" (use {A.flag('objective')} electra)" if found == "electra" else "")
        )


# ---------------------------------------------------------------------------------------- mlm


def mlm_loss(model: nn.Module, batch: dict[str, Any], out: Any = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """Sparse-MLM loss of a ``BertForMaskedLM`` (of its output ``out`` when given); under DDP weighted
    to the global masked-token mean."""
    from bertkit.training.mlm import _token_weight

    out = out if out is not None else model(**batch, sparse_mlm=True)
    return out.loss * _token_weight(batch["labels"]), {"mlm_loss": out.loss}


def cls_bag_of_words_loss(
    base: Any, weight: float, special_ids: Sequence[int]
) -> Any:  # (model, batch) -> (loss, metrics)
    """``base`` (:func:`mlm_loss` or ``mlm_nsp_loss``) plus ``weight`` x the bag-of-words loss of the
    first token: [CLS]'s final hidden state, through the MLM head, predicts the distribution of the
    sequence's own (unmasked, original) tokens, uniform over the distinct ones.

    Masked LM never trains [CLS]: it is never masked, so its state is whatever helps the other
    positions attend. A classifier fine-tuned on [CLS] then starts from a token that summarises
    nothing, and on short-text tasks a pretrained model scored below a random one (whose uniform
    attention makes [CLS] a mean of the tokens). The bag of words makes [CLS] that summary.

    The first position joins the sparse MLM rows (the model predicts it beside the masked ones and
    leaves it out of its masked-LM loss), so the one forward through the model, packing and DDP
    included, gives its logits: no hook, no second pass, no second cross-entropy.
    """
    special = torch.tensor(sorted(set(int(i) for i in special_ids)), dtype=torch.long)

    def loss_fn(model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        labels, ids = batch["labels"], batch["input_ids"]
        first = torch.zeros_like(labels, dtype=torch.bool)  # (B, N)
        first[:, 0] = True
        out = model(**batch, sparse_mlm=first)
        logits = out.logits if getattr(out, "logits", None) is not None else out.prediction_logits
        rows = first | (labels != -100)  # (B, N), the rows of ``logits`` in row-major order
        cls_rows = rows.nonzero()[:, 1] == 0  # (M,) the [CLS] rows, one per sequence
        loss, metrics = base(model, batch, out)
        # (B, V) target: the distinct real tokens of each sequence, as they were before masking
        original = torch.where(labels != -100, labels, ids)
        keep = ~torch.isin(original, special.to(original.device))
        if "attention_mask" in batch:
            keep &= batch["attention_mask"].bool()
        vocab = logits.shape[-1]
        target = torch.zeros(ids.shape[0], vocab + 1, device=logits.device)
        target.scatter_(1, torch.where(keep, original, vocab), 1.0)
        target = target[:, :vocab]
        target = target / target.sum(-1, keepdim=True).clamp_min(1.0)
        bow = -(target * F.log_softmax(logits[cls_rows].float(), dim=-1)).sum(-1).mean()
        return loss + weight * bow, {**metrics, "cls_bow_loss": bow}

    return loss_fn


def evaluate_mlm(
    model: nn.Module, dataset: Any, collate: Any, batch_size: int = 64, device: Any = None, amp_dtype: Any = None
) -> dict[str, float]:
    """Held-out MLM accuracy, loss and perplexity of a masked LM (BERT's or ELECTRA's generator)."""
    device = device or next(model.parameters()).device
    correct = total = 0
    loss_sum = 0.0
    for batch in _batches(dataset, collate, batch_size, device):
        with _autocast(device, amp_dtype):
            out = model(**batch, sparse_mlm=True)
        labels = batch["labels"][batch["labels"] != -100]
        logits = out.logits.float()
        loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
        correct += int((logits.argmax(-1) == labels).sum())
        total += int(labels.numel())
    loss = loss_sum / max(total, 1)
    return {"mlm_accuracy": correct / max(total, 1), "mlm_loss": loss, "perplexity": math.exp(min(loss, 50.0))}


def _batches(dataset: Any, collate: Any, batch_size: int, device: Any):
    for start in range(0, len(dataset), batch_size):
        batch = collate([dataset[i] for i in range(start, min(len(dataset), start + batch_size))])
        yield {k: v.to(device) for k, v in batch.items()}


def _autocast(device: Any, amp_dtype: Any) -> contextlib.AbstractContextManager:
    return torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()


# ---------------------------------------------------------------------------------------- electra


def generator_config(discriminator: Any, size: float | None) -> Any:
    """The generator's ElectraConfig: ``size`` (None: :data:`GENERATOR_SIZE`, in whole heads) x the
    discriminator's hidden size, heads and feed-forward, the same depth, vocabulary and embedding
    size (the embeddings are shared)."""
    from bertkit.modeling.electra import ElectraConfig

    d = discriminator
    hidden, heads = generator_shape(d.hidden_size, d.num_attention_heads, size)
    fraction = heads / d.num_attention_heads
    fields = {
        f.name: getattr(d, f.name)
        for f in dataclasses.fields(ElectraConfig)
        if f.name not in ("extra", "architectures", "id2label", "label2id", "num_labels")
    }
    fields.update(
        hidden_size=hidden, num_attention_heads=heads, intermediate_size=max(1, round(d.intermediate_size * fraction))
    )
    return ElectraConfig(**fields)


# The generator's default size: a quarter of the discriminator's (as in ELECTRA), rounded to whole
# heads and at least one, so that a discriminator of two heads (the tiny preset) gets one, not half.
GENERATOR_SIZE = 0.25


def generator_size(num_heads: int, size: float | None) -> float:
    """The generator's size as a fraction of the discriminator's: ``size``, or for None the
    :data:`GENERATOR_SIZE` share of ``num_heads`` rounded to whole heads (at least one)."""
    if size is not None:
        return float(size)
    return max(1, round(num_heads * GENERATOR_SIZE)) / num_heads


def generator_shape(hidden_size: int, num_heads: int, size: float | None) -> tuple[int, int]:
    """(hidden size, heads) of the generator: the discriminator's head size, ``size`` x its heads
    (None: :func:`generator_size`'s default). A size that gives a fractional head count, or none,
    is an error naming the sizes that work."""
    if num_heads < 1 or hidden_size % num_heads:
        raise ValueError(f"the discriminator's {hidden_size} hidden units do not split into {num_heads} heads")
    size = generator_size(num_heads, size)
    hidden, heads = hidden_size * size, num_heads * size
    if abs(heads - round(heads)) > 1e-6 or round(heads) < 1 or abs(hidden - round(hidden)) > 1e-6:
        fits = sorted({k / num_heads for k in range(1, num_heads + 1)})
        raise ValueError(
            f"{A.given('generator_size', f'{size:g}')} gives the generator {hidden:g} hidden units in "
            f"{heads:g} attention heads "
            f"(discriminator: {hidden_size} in {num_heads} heads); it needs a whole number of heads of "
            f"{hidden_size // num_heads} units, at least one: use one of {', '.join(f'{f:g}' for f in fits)}"
        )
    return round(hidden), round(heads)


@dataclass(repr=True, eq=False)
class ElectraPretrainingOutput(ModelOutput):
    loss: torch.Tensor | None = None  # mlm_loss + DISCRIMINATOR_WEIGHT * disc_loss
    mlm_loss: torch.Tensor | None = None  # the generator's, over masked tokens
    disc_loss: torch.Tensor | None = None  # the discriminator's BCE, over real tokens
    mlm_logits: torch.Tensor | None = None  # (M, V) at the masked positions
    disc_logits: torch.Tensor | None = None  # (B, N)
    disc_labels: torch.Tensor | None = None  # (B, N) 1 = replaced


class ElectraPretrainingModel(nn.Module):
    """Generator and discriminator as one module for the Trainer; the generator uses the
    discriminator's embeddings module (word, position, type embeddings and their LayerNorm)."""

    def __init__(
        self, discriminator: nn.Module, generator: nn.Module, tokenizer: Any = None, temperature: float = 1.0
    ) -> None:
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"the generator's sampling temperature must be > 0, got {temperature}")
        if discriminator.config.embedding_size != generator.config.embedding_size:
            raise ValueError(
                f"the generator's embedding_size ({generator.config.embedding_size}) must equal the "
                f"discriminator's ({discriminator.config.embedding_size}) to share the embeddings"
            )
        self.discriminator = discriminator
        self.generator = generator
        generator.electra.embeddings = discriminator.electra.embeddings
        generator.tie_weights()  # the generator's output layer follows the shared word embeddings
        self.tokenizer = tokenizer  # saved beside both models
        self.temperature = temperature  # of the generator's softmax when it samples replacements

    @property
    def config(self) -> Any:
        return self.discriminator.config

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, N) masked for the generator
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # (B, N) original ids at masked positions, -100 elsewhere
        sampler: torch.Generator | None = None,  # the random stream of the sampling (default: torch's)
    ) -> ElectraPretrainingOutput:
        from bertkit.data.replaced_tokens import replace_with_samples

        gen = self.generator(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels, sparse_mlm=True
        )
        replaced, disc_labels = replace_with_samples(gen.logits.detach(), input_ids, labels, sampler, self.temperature)
        disc = self.discriminator(
            replaced, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=disc_labels
        )
        return ElectraPretrainingOutput(
            loss=gen.loss + DISCRIMINATOR_WEIGHT * disc.loss,
            mlm_loss=gen.loss,
            disc_loss=disc.loss,
            mlm_logits=gen.logits,
            disc_logits=disc.logits,
            disc_labels=disc_labels,
        )

    def save_pretrained(self, save_directory: str | Path, tokenizer: Any = None, **kwargs: Any) -> Path:
        """The discriminator into ``save_directory``, the generator into ``save_directory/generator``."""
        tokenizer = tokenizer or self.tokenizer
        self.discriminator.save_pretrained(save_directory, tokenizer=tokenizer, **kwargs)
        self.generator.save_pretrained(Path(save_directory) / "generator", tokenizer=tokenizer, **kwargs)
        return Path(save_directory)

    def load_folder_weights(self, directory: Path) -> None:
        """Weights of a folder :meth:`save_pretrained` wrote (resuming from a checkpoint)."""
        from bertkit.training.checkpoint_folders import load_model_weights

        load_model_weights(self.generator, Path(directory) / "generator")
        load_model_weights(self.discriminator, Path(directory))  # last: the shared embeddings are its


def electra_loss(model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    """The Trainer ``loss_fn`` of ``electra``: generator MLM + 50 x discriminator BCE, with accuracies."""
    from bertkit.training.mlm import _token_weight

    out = model(**batch)
    labels = batch["labels"]
    masked = labels[labels != -100]
    real = batch["attention_mask"] == 1 if "attention_mask" in batch else torch.ones_like(labels, dtype=torch.bool)
    with torch.no_grad():
        gen_acc = (out.mlm_logits.argmax(-1) == masked).float().mean()
        disc_acc = ((out.disc_logits > 0).long() == out.disc_labels)[real].float().mean()
        replaced = out.disc_labels[real].float().mean()
    loss = out.mlm_loss * _token_weight(labels) + DISCRIMINATOR_WEIGHT * out.disc_loss
    return loss, {
        "mlm_loss": out.mlm_loss,
        "disc_loss": out.disc_loss,
        "mlm_accuracy": gen_acc,
        "disc_accuracy": disc_acc,
        "replaced_fraction": replaced,
    }


def evaluate_electra(
    model: ElectraPretrainingModel,
    dataset: Any,
    collate: Any,
    batch_size: int = 64,
    device: Any = None,
    amp_dtype: Any = None,
    seed: int = 0,
) -> dict[str, float]:
    """Held-out generator MLM accuracy and loss; discriminator loss, accuracy over real tokens,
    accuracy on the replaced tokens and AUC (replaced vs original). The sampling has its own seeded
    stream, so evaluating never moves the training's random state."""
    from bertkit._stats import roc_auc

    device = device or next(model.parameters()).device
    sampler = torch.Generator(device=device).manual_seed(seed)
    correct = total = 0
    mlm_sum = disc_sum = 0.0
    scores, targets = [], []
    for batch in _batches(dataset, collate, batch_size, device):
        with _autocast(device, amp_dtype):
            out = model(**batch, sampler=sampler)
        masked = batch["labels"][batch["labels"] != -100]
        logits = out.mlm_logits.float()
        mlm_sum += float(F.cross_entropy(logits, masked, reduction="sum"))
        correct += int((logits.argmax(-1) == masked).sum())
        total += int(masked.numel())
        real = batch["attention_mask"] == 1
        s, y = out.disc_logits.float()[real], out.disc_labels[real]
        disc_sum += float(F.binary_cross_entropy_with_logits(s, y.float(), reduction="sum"))
        scores.append(s.cpu())
        targets.append(y.cpu())
    s, y = (torch.cat(scores), torch.cat(targets)) if scores else (torch.zeros(0), torch.zeros(0, dtype=torch.long))
    n, replaced = max(len(y), 1), y == 1
    metrics = {
        "mlm_accuracy": correct / max(total, 1),
        "mlm_loss": mlm_sum / max(total, 1),
        "disc_loss": disc_sum / n,
        "disc_accuracy": float(((s > 0).long() == y).float().sum()) / n,
        "disc_replaced_accuracy": float((s[replaced] > 0).float().mean()) if bool(replaced.any()) else 0.0,
        "replaced_fraction": float(replaced.float().sum()) / n,
    }
    auc = roc_auc(s.numpy(), y.numpy()) if len(y) else float("nan")
    if not math.isnan(auc):
        metrics["disc_auc"] = auc
    return metrics


def _electra_model(args: Any, config: Any, tokenizer: Any) -> ElectraPretrainingModel:
    """A new discriminator and generator from the BERT preset ``config``, or ``--model``'s pair."""
    from bertkit.modeling import check_vocab_fits
    from bertkit.modeling.electra import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    if args.model:
        disc = ElectraForPreTraining.from_pretrained(args.model)  # build_pretraining sets --dropout
        check_vocab_fits(tokenizer, disc.config, str(args.model))
        if args.seq_len > disc.config.max_position_embeddings:
            raise ValueError(
                f"{A.given('seq_len', str(args.seq_len))} exceeds the model's max_position_embeddings "
                f"({disc.config.max_position_embeddings})"
            )
    else:
        fields = {
            k: v
            for k, v in config.to_dict().items()
            if k in ElectraConfig.field_names() and k not in ("model_type", "architectures")
        }
        disc = ElectraForPreTraining(ElectraConfig(**fields, embedding_size=config.hidden_size))
    gen_cfg = generator_config(disc.config, args.generator_size)
    saved = Path(args.model, "generator") if args.model else None
    if saved is not None and (saved / "config.json").is_file():
        gen = ElectraForMaskedLM.from_pretrained(saved)
    else:
        gen = ElectraForMaskedLM(gen_cfg)
    return ElectraPretrainingModel(disc, gen, tokenizer, args.generator_temperature)


def _modernbert(args: Any) -> bool:
    """Whether the run trains a ModernBERT (a --model folder's family, else --architecture); a
    ModernBERT has no next-sentence head, so it trains masked LM only."""
    given = getattr(args, "architecture", None)
    family = _folder_model_type(args.model) if args.model else (given or "bert")
    if given and family != given:  # a checkpoint of one family is never trained as another
        raise ValueError(
            f"{A.given('architecture', given)} trains a {given!r} model, but {A.given('model', str(args.model))} "
            f"is a {family!r} model: leave out {A.flag('architecture')} to continue it as it is"
        )
    modern = family == "modernbert"
    if modern and args.objective == "electra":
        raise ValueError(
            f"{A.flag('objective')} electra trains ELECTRA models; a ModernBERT trains {A.flag('objective')} mlm"
        )
    if modern and args.objective == "mlm+nsp" and not args.no_nsp:
        raise ValueError(
            f"a ModernBERT has no next-sentence head: give {A.flag('objective')} mlm (or {A.flag('no_nsp')})"
        )
    return modern


def _modernbert_mlm(args: Any) -> Any:  # (config, tokenizer) -> ModernBertForMaskedLM
    from bertkit.modeling.modernbert import ModernBertForMaskedLM

    def make(config: Any, tokenizer: Any) -> nn.Module:
        if args.model:
            return ModernBertForMaskedLM.from_pretrained(args.model, config=config)
        return ModernBertForMaskedLM(config)

    return make


def build_objective(args: Any) -> dict[str, Any]:
    """:func:`~bertkit.training.pretraining.build_pretraining`'s parts for ``args.objective``, plus
    ``loss_fn`` and ``evaluate(model, dataset, collate, device, amp_dtype)``."""
    from bertkit.training.mlm import build_pretraining, evaluate_pretraining, mlm_nsp_loss

    objective = getattr(args, "objective", "mlm+nsp")
    _check_model_folder(args)
    modern = _modernbert(args)
    if objective in ("mlm+nsp", "mlm"):
        if modern:
            parts = {**build_pretraining(args, make_model=_modernbert_mlm(args)), "loss_fn": mlm_loss}
            parts["evaluate"] = evaluate_mlm
        elif objective == "mlm+nsp":
            parts = {**build_pretraining(args), "loss_fn": mlm_nsp_loss, "evaluate": evaluate_pretraining}
        else:
            from bertkit.modeling import BertForMaskedLM

            def make_mlm(config: Any, tokenizer: Any) -> nn.Module:
                if args.model:
                    return BertForMaskedLM.from_pretrained(args.model, config=config)
                return BertForMaskedLM(config)

            parts = {**build_pretraining(args, make_model=make_mlm), "loss_fn": mlm_loss, "evaluate": evaluate_mlm}
        if getattr(args, "cls_bow_weight", 0.0):
            vocab = parts["vocab"]
            special = [vocab.index(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]") if t in vocab]
            parts["loss_fn"] = cls_bag_of_words_loss(parts["loss_fn"], args.cls_bow_weight, special)
        return parts

    from bertkit.data.replaced_tokens import electra_collator
    from bertkit.modeling import BertConfig
    from bertkit.training.mlm import masked_fraction

    # The generator's shape is checked before any data is prepared.
    shape = _read_config(args.model) if args.model else BertConfig.from_preset(args.config).to_dict()
    hidden, _ = generator_shape(shape["hidden_size"], shape["num_attention_heads"], args.generator_size)
    saved = Path(args.model, "generator") if args.model else None
    if saved is not None and (saved / "config.json").is_file() and args.generator_size is not None:
        own = _read_config(str(saved)).get("hidden_size")
        if own != hidden:  # the saved generator is continued as it is
            raise ValueError(
                f"{A.given('generator_size', f'{args.generator_size:g}')} gives a generator of {hidden} hidden "
                f"units, but {A.given('model', str(args.model))} continues its own of {own} ({saved}): leave out "
                f"{A.flag('generator_size')}"
            )
    if args.model:  # a discriminator folder: build_pretraining reads its vocabulary, the model comes below
        args = dataclasses.replace(args, vocab=args.vocab or str(Path(args.model) / "vocab.txt"))

    def make_electra(config: Any, tokenizer: Any) -> nn.Module:
        return _electra_model(args, config, tokenizer)

    parts = build_pretraining(dataclasses.replace(args, model=None), make_model=make_electra)
    if args.model:  # the run's identity and summary describe the discriminator
        parts["config"] = parts["model"].config
    # The size the generator has (a default resolved, or a --model's own), for the run's identity.
    pair = parts["model"]
    parts["generator_size"] = pair.generator.config.num_attention_heads / pair.discriminator.config.num_attention_heads
    parts["collate"] = electra_collator(parts["vocab"], masked_fraction(args), args.whole_word_masking, args.seed)
    seed = args.seed + 1

    def evaluate(model: nn.Module, dataset: Any, collate: Any, device: Any = None, amp_dtype: Any = None):
        return evaluate_electra(model, dataset, collate, device=device, amp_dtype=amp_dtype, seed=seed)

    return {**parts, "loss_fn": electra_loss, "evaluate": evaluate}
