"""Knowledge distillation of a fine-tuned BERT classifier into a DistilBERT-shaped student.

As in DistilBERT (Sanh et al. 2019):

* the student has the teacher's width and every other layer: student layer i starts from teacher layer
  ``round(i * L_teacher / L_student)`` (0, 2, 4 for 6 -> 3), with the teacher's embeddings (its
  token-type-0 vector folded into the position table, since DistilBERT has no segments, so the
  embeddings compute exactly what the teacher's did) and its pooler/classifier as the
  ``pre_classifier``/``classifier``;
* the loss is ``alpha_ce`` x soft-target cross-entropy between the teacher's and the student's
  softmax at temperature T (scaled by T², so gradients keep their size as T changes) + ``alpha_hard`` x
  the cross-entropy on the gold labels + ``alpha_cos`` x (1 - cosine) between the two models' last hidden
  states on real tokens.

It runs on the shared Trainer through its loss hook (the teacher lives in the loss's closure), with the
usual progress bar, metrics.jsonl, plots, checkpoints and resume. The student folder is a regular
fine-tuned model: ``bertkit evaluate``/``predict`` and ``pipeline("text-classification")`` take it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertkit import _args as A
from bertkit._args import redefault, setting
from bertkit.hub import resolve_model_arg
from bertkit.training.run_folders import TRAINER_OUTPUTS, claim_training_output, run_identity, within_claim
from bertkit.training.training_args import TrainingArguments

__all__ = ["DistillArguments", "DistillConfig", "compare_speed", "distill", "distillation_loss", "student_from_teacher"]


def _layer_map(teacher_layers: int, student_layers: int) -> list[int]:
    if not 1 <= student_layers <= teacher_layers:
        raise ValueError(
            f"student_layers must be in [1, {teacher_layers}] (the teacher's layers), got {student_layers}"
        )
    return [round(i * teacher_layers / student_layers) for i in range(student_layers)]


@torch.no_grad()
def student_from_teacher(teacher: nn.Module, student_layers: int) -> nn.Module:
    """A DistilBertForSequenceClassification initialised from a BertForSequenceClassification teacher."""
    from bertkit.modeling.distilbert import (
        DistilBertConfig,
        DistilBertForSequenceClassification,
    )

    tc = teacher.config
    if tc.model_type != "bert" or not hasattr(teacher, "classifier"):
        raise ValueError(
            f"the teacher must be a BERT sequence classifier, got {type(teacher).__name__} "
            f"(model_type {tc.model_type!r})"
        )
    layers = _layer_map(tc.num_hidden_layers, student_layers)
    config = DistilBertConfig(
        vocab_size=tc.vocab_size,
        max_position_embeddings=tc.max_position_embeddings,
        n_layers=student_layers,
        n_heads=tc.num_attention_heads,
        dim=tc.hidden_size,
        hidden_dim=tc.intermediate_size,
        activation=tc.hidden_act,
        dropout=tc.hidden_dropout_prob,
        attention_dropout=tc.attention_probs_dropout_prob,
        initializer_range=tc.initializer_range,
        pad_token_id=tc.pad_token_id,
        num_labels=tc.num_labels,
        id2label=dict(tc.id2label),
        label2id=dict(tc.label2id),
        problem_type=tc.problem_type,
    )
    for key in ("finetuning_task", "bertkit_task_options"):
        if key in tc.extra:
            setattr(config, key, tc.extra[key])
    config.distilled_from_layers = layers
    student = DistilBertForSequenceClassification(config)
    te, se = teacher.bert.embeddings, student.distilbert.embeddings
    se.word_embeddings.weight.copy_(te.word_embeddings.weight)
    se.position_embeddings.weight.copy_(te.position_embeddings.weight + te.token_type_embeddings.weight[0])
    se.LayerNorm.load_state_dict(te.LayerNorm.state_dict())
    pairs = {
        "attention.q_lin": "attention.self.query",
        "attention.k_lin": "attention.self.key",
        "attention.v_lin": "attention.self.value",
        "attention.out_lin": "attention.output.dense",
        "sa_layer_norm": "attention.output.LayerNorm",
        "ffn.lin1": "intermediate.dense",
        "ffn.lin2": "output.dense",
        "output_layer_norm": "output.LayerNorm",
    }
    for i, j in enumerate(layers):
        s_layer, t_layer = student.distilbert.transformer.layer[i], teacher.bert.encoder.layer[j]
        for s_name, t_name in pairs.items():
            s_layer.get_submodule(s_name).load_state_dict(t_layer.get_submodule(t_name).state_dict())
    if teacher.bert.pooler is not None:
        student.pre_classifier.load_state_dict(teacher.bert.pooler.dense.state_dict())
    student.classifier.load_state_dict(teacher.classifier.state_dict())
    return student


def distillation_loss(
    student_logits: torch.Tensor,  # (B, C)
    teacher_logits: torch.Tensor,  # (B, C)
    labels: torch.Tensor | None,  # (B,)
    temperature: float,
    alpha_ce: float,
    alpha_hard: float,
    alpha_cos: float = 0.0,
    student_hidden: torch.Tensor | None = None,  # (B, N, H)
    teacher_hidden: torch.Tensor | None = None,  # (B, N, H)
    attention_mask: torch.Tensor | None = None,  # (B, N)
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The weighted sum of the soft, hard and cosine losses, and each term for the logs."""
    T = temperature
    soft = -(F.softmax(teacher_logits.float() / T, -1) * F.log_softmax(student_logits.float() / T, -1)).sum(-1).mean()
    soft = soft * T * T
    loss = alpha_ce * soft
    logs = {"soft_loss": soft.detach()}
    if alpha_hard > 0 and labels is not None:
        hard = F.cross_entropy(student_logits.float(), labels)
        loss = loss + alpha_hard * hard
        logs["hard_loss"] = hard.detach()
    if alpha_cos > 0 and student_hidden is not None and teacher_hidden is not None:
        real = (
            attention_mask.bool()
            if attention_mask is not None
            else torch.ones(student_hidden.shape[:2], dtype=torch.bool)
        )
        cos = 1 - F.cosine_similarity(student_hidden[real].float(), teacher_hidden[real].float(), dim=-1).mean()
        loss = loss + alpha_cos * cos
        logs["cos_loss"] = cos.detach()
    return loss, logs


@dataclass(kw_only=True)
class DistillArguments(TrainingArguments):
    """Every setting of `bertkit distill`: the shared training arguments plus the distillation's own."""

    teacher: str = setting(
        metavar="DIR",
        group="data",
        same_on_resume=False,
        help="a fine-tuned BERT text classifier (a `bertkit finetune` output folder, or a cached model id)",
    )
    train: str = setting(metavar="FILE", group="data", same_on_resume=False, help="training file")
    validation: str | None = setting(
        None,
        metavar="FILE",
        group="data",
        same_on_resume=False,
        help="validation file: the teacher's and the student's scores side by side",
    )
    output: str = redefault(TrainingArguments, "output")  # required
    student_layers: int = setting(
        3, type=A.positive_int, group="distillation", help="layers of the student, taken from every other teacher layer"
    )
    alpha_ce: float = setting(
        0.5, type=A.nonnegative_float, group="distillation", help="weight of the soft-target loss"
    )
    alpha_hard: float = setting(
        0.5, type=A.nonnegative_float, group="distillation", help="weight of the gold-label loss"
    )
    alpha_cos: float = setting(
        0.0, type=A.nonnegative_float, group="distillation", help="weight of the hidden-state cosine loss (0: off)"
    )
    temperature: float = setting(
        2.0, type=A.positive_float, group="distillation", help="softmax temperature of the soft targets"
    )
    max_length: int | None = setting(
        None,
        type=A.SEQ_LEN,
        group="data",
        help="max tokens per example (default: the teacher's fine-tuning max_length)",
    )
    max_train_samples: int | None = setting(
        None, type=A.positive_int, group="data", help="first N training examples only"
    )
    epochs: float = redefault(TrainingArguments, "epochs", 2.0)
    lr: float = redefault(TrainingArguments, "lr", 1e-4)
    warmup_ratio: float = redefault(TrainingArguments, "warmup_ratio", 0.1)
    seed: int = redefault(TrainingArguments, "seed", 0)
    precision: str = redefault(TrainingArguments, "precision", "fp32")
    log_every: int = redefault(TrainingArguments, "log_every", 10)
    drop_last: bool = redefault(TrainingArguments, "drop_last", False)


DistillConfig = DistillArguments  # its former name

# What `bertkit distill` writes into its --output.
DISTILL_OUTPUTS = (*TRAINER_OUTPUTS, "distill_results.json")


def _check_teacher(path: str) -> None:
    """A teacher must be a fine-tuned text classifier; say so in distill's own terms (it has no --task)."""
    import json

    f = Path(path) / "config.json"
    if not f.is_file():
        raise FileNotFoundError(f"--teacher {path}: no config.json; give a `bertkit finetune` output folder")
    try:
        config = json.loads(f.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{A.given('teacher', str(path))}: config.json is not valid JSON ({e})") from None
    task = config.get("finetuning_task") if isinstance(config, dict) else None
    if task != "text-classification":
        what = f"fine-tuned for {task}" if task else "has no fine-tuned head (no finetuning_task in config.json)"
        raise ValueError(
            f"{A.given('teacher', str(path))} {what}; distill needs a BERT text classifier: fine-tune one first with "
            f"`bertkit finetune --task text-classification --model {path} ...`"
        )


def _distill_loss(teacher: nn.Module, args: DistillArguments) -> Any:
    """The Trainer loss_fn: the teacher (frozen, in this closure) scores each batch the student sees."""
    want_hidden = args.alpha_cos > 0

    def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        inputs = {k: v for k, v in batch.items() if k in _INPUT_KEYS}
        with torch.no_grad():
            t_out = teacher(**inputs, output_hidden_states=want_hidden)
        s_out = model(**inputs, output_hidden_states=want_hidden)
        return distillation_loss(
            s_out.logits,
            t_out.logits,
            batch.get("labels"),
            args.temperature,
            args.alpha_ce,
            args.alpha_hard,
            args.alpha_cos,
            s_out.hidden_states[-1] if want_hidden else None,
            t_out.hidden_states[-1] if want_hidden else None,
            batch.get("attention_mask"),
        )

    return loss_fn


_INPUT_KEYS = ("input_ids", "token_type_ids", "attention_mask")


def distill(args: DistillArguments) -> dict[str, Any]:
    """Distil the classifier in ``args.teacher`` into a student saved at ``args.output``; returns metrics.

    With a validation file the result holds the teacher's and the student's scores side by side.
    ``--output`` follows the folder rule of every training command (:mod:`bertkit.training.run_folders`)
    and may not be the teacher's folder.
    """
    import dataclasses

    from bertkit._folders import file_fingerprint
    from bertkit.data.batching import LengthGroupedBatchSampler, collate_features
    from bertkit.tasks.api import _Features, load_finetuned
    from bertkit.training import Trainer

    # A teacher id resolves to its cache snapshot once: it is loaded and fingerprinted from there.
    args = dataclasses.replace(args, teacher=str(resolve_model_arg(args.teacher, "--teacher")))
    inputs = {"--teacher": args.teacher, "--train": args.train, "--validation": args.validation}
    claim_training_output(args, "distill", {}, DISTILL_OUTPUTS, inputs, dry_run=True)
    _check_teacher(args.teacher)
    task, teacher, tok = load_finetuned(args.teacher, **({"max_length": args.max_length} if args.max_length else {}))
    train_ex = task.read(args.train)[: args.max_train_samples or None]
    task.check(args.train, train_ex)
    val_ex = task.read(args.validation) if args.validation else None
    if val_ex is not None:
        task.check(args.validation, val_ex)
    train_enc = task.encode(tok, train_ex)
    val_enc = task.encode(tok, val_ex) if val_ex is not None else None
    teacher_files = [Path(args.teacher) / n for n in ("config.json", "model.safetensors", "pytorch_model.bin")]
    identity = run_identity(
        args,
        teacher=file_fingerprint(*[f for f in teacher_files if f.is_file()]),
        data=file_fingerprint(args.train, args.validation),
    )
    torch.manual_seed(args.seed)
    student = student_from_teacher(teacher, args.student_layers)  # before the claim: a bad depth leaves nothing
    claim = claim_training_output(args, "distill", identity, DISTILL_OUTPUTS, inputs)
    teacher.eval().requires_grad_(False)
    feats = train_enc.features
    sampler = LengthGroupedBatchSampler(
        [len(f["input_ids"]) for f in feats], args.batch_size, shuffle=True, seed=args.seed, bucket_batches=50
    )
    evaluate = None
    if val_ex is not None:

        def evaluate(m: nn.Module) -> dict[str, float]:
            return task.evaluate(m, tok, val_ex, val_enc, progress=False)

    tcfg = dataclasses.replace(
        args, eval_each_epoch=evaluate is not None, run_name=f"distill {args.student_layers} layers"
    )
    trainer = Trainer(
        student,
        tcfg,
        _Features(feats),
        collate_fn=collate_features,
        batch_sampler=sampler,
        evaluate=evaluate,
        loss_fn=_distill_loss(teacher, args),
        tokenizer=tok,
    )
    teacher.to(trainer.device)

    def work() -> dict[str, Any]:
        res = trainer.train()
        out: dict[str, Any] = {
            "steps": res.step,
            "train_seconds": round(trainer.elapsed_seconds, 1),  # a resumed run's earlier processes included
            "student_layers": args.student_layers,
            "teacher_layers": teacher.config.num_hidden_layers,
        }
        if val_ex is not None:
            out.update(_side_by_side(task, teacher, student, tok, val_ex, val_enc, trainer.device))
        from bertkit._io import atomic_write_json

        atomic_write_json(Path(args.output) / "distill_results.json", out)
        return out

    return within_claim(claim, work)


def _side_by_side(
    task: Any, teacher: nn.Module, student: nn.Module, tok: Any, val_ex: Any, val_enc: Any, device: Any
) -> dict[str, Any]:
    """The teacher's and the student's validation scores, and their speed on the same batches."""
    from bertkit.data.batching import collate_features

    out: dict[str, Any] = {
        "teacher": task.evaluate(teacher, tok, val_ex, val_enc, progress=False),
        "student": task.evaluate(student, tok, val_ex, val_enc, progress=False),
    }
    # Inference speed of both on the same validation batches, in this process, interleaved.
    vf = val_enc.features[: 32 * 8]
    batches = [
        {
            k: v.to(device)
            for k, v in collate_features([{k: f[k] for k in _INPUT_KEYS if k in f} for f in vf[i : i + 32]]).items()
        }
        for i in range(0, len(vf), 32)
    ]
    out["speed"] = compare_speed(teacher, student, batches)
    return out


@torch.inference_mode()
def compare_speed(
    teacher: nn.Module, student: nn.Module, batches: list[dict[str, torch.Tensor]], repeats: int = 5
) -> dict[str, float]:
    """Median seconds per pass over ``batches`` for both models, interleaved so load changes hit both alike."""
    import statistics

    times: dict[str, list[float]] = {"teacher": [], "student": []}
    for m in (teacher, student):
        m.eval()
        m(**batches[0])  # warm-up
    for _ in range(repeats):
        for name, m in (("teacher", teacher), ("student", student)):
            t0 = time.perf_counter()
            for b in batches:
                m(**b)
            times[name].append(time.perf_counter() - t0)
    t, s = statistics.median(times["teacher"]), statistics.median(times["student"])
    return {"teacher_seconds": t, "student_seconds": s, "speedup": t / s}
