"""Training a static model with `bertkit train-embedder`, and fitting one to a teacher's vectors.

:class:`StaticEncoder` is a static folder (model2vec's or sentence-transformers' layout) as
``train-embedder``'s trainer sees an encoder: ``tokenize``, ``encoder(features)`` with gradients,
``encode`` without, ``dim`` and ``save``; what the one :class:`~bertkit.training.Trainer` optimises
and checkpoints is :class:`StaticTable`, the table of token vectors. So a static model trains with
every loss of ``train-embedder`` that applies (MNRL, cached MNRL, Matryoshka, CoSENT, triplet),
resumes after a kill and logs as any run does, and the output is a static folder again.

Teacher fitting (``--loss mse --teacher DIR``, tokenlearn's idea, no labels needed): the teacher's
sentence vectors of a corpus of texts are the targets, and MSE pulls the student's vectors of the
same texts onto them. A distilled static model has its own PCA axes (of the teacher's token
vectors), so the teacher's sentence vectors are first projected the same way: PCA to the student's
width, then the orthogonal rotation that best maps them onto the student's own vectors of the corpus
(Procrustes). The targets keep the teacher's geometry (a rotation changes no cosine) in the student's
axes, and the fit starts from where the student is. The targets are computed once and kept in the
output folder (``teacher-targets.npy``), so a resumed run does not run the teacher again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["TARGETS", "StaticEncoder", "StaticTable", "load_static_encoder", "project_teacher", "teacher_targets"]

TARGETS = "teacher-targets.npy"  # the teacher's projected vectors of --train, kept for --resume


class StaticTable(nn.Module):
    """A :class:`~bertkit.sentence.static.StaticEmbedding`'s table as the Trainer trains it:
    ``forward(input_ids, offsets)`` gives each text's mean row, and a checkpoint (a static folder)
    reads back with :meth:`load_folder_weights`."""

    def __init__(self, static: nn.Module) -> None:
        super().__init__()
        self.static = static

    def forward(self, input_ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.static.embedding(input_ids, offsets)

    def load_folder_weights(self, directory: str | Path) -> None:
        """The vectors of the static folder ``directory`` (a checkpoint this run wrote)."""
        from bertkit.modeling.static import load_static

        weight = load_static(directory).weight
        mine = self.static.embedding.weight
        if weight.shape != mine.shape:
            raise ValueError(
                f"{directory}: vectors of shape {tuple(weight.shape)}, this model's are {tuple(mine.shape)}"
            )
        with torch.no_grad():
            mine.copy_(weight.to(mine.device))


class StaticEncoder:
    """A static model as train-embedder's encoder: ``enc(features) -> (B, dims)`` with gradients,
    L2-normalised when the folder normalises (its ``Normalize``); ``tokenize`` gives flat ids and
    offsets, as sentence-transformers' StaticEmbedding does. ``config``: the model2vec settings kept
    in the saved folder's config.json."""

    pooling = "mean"
    max_seq_length = None  # a static model reads each text whole

    def __init__(self, static: Any, normalize: bool = True, config: dict[str, Any] | None = None) -> None:
        self.static = static
        self.model = StaticTable(static)
        self.tokenizer = static.tokenizer
        self.normalize = bool(normalize)
        self.config = dict(config or {})

    @property
    def dim(self) -> int:
        """The width of the vectors."""
        return int(self.static.embedding_dim)

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return self.static.tokenize(list(texts))

    def __call__(self, features: dict[str, torch.Tensor], model: nn.Module | None = None) -> torch.Tensor:
        """Sentence vectors of tokenized texts; ``model`` (e.g. the DDP wrapper) replaces ``self.model``."""
        vec = (model or self.model)(features["input_ids"], features["offsets"])
        return nn.functional.normalize(vec, dim=-1) if self.normalize else vec

    @torch.no_grad()
    def encode(self, texts: Sequence[str], batch_size: int = 4096) -> torch.Tensor:
        """(len(texts), dims) float32 vectors without gradients, on the CPU."""
        texts = list(texts)
        device = self.static.embedding.weight.device
        parts = [
            self({k: v.to(device) for k, v in self.tokenize(texts[s : s + batch_size]).items()}).float().cpu()
            for s in range(0, len(texts), max(1, batch_size))
        ]
        return torch.cat(parts) if parts else torch.zeros((0, self.dim))

    def save(self, directory: str | Path) -> None:
        """The static folder, in model2vec's layout (model2vec, sentence-transformers and bertkit load it)."""
        from bertkit.modeling.static import bert_tokenizer_json, save_static

        tokens = [t for t, _ in sorted(self.tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
        save_static(
            directory,
            self.static.embedding.weight,
            bert_tokenizer_json(self.tokenizer, tokens),
            normalize=self.normalize,
            config=self.config,
        )


def load_static_encoder(folder: str | Path) -> StaticEncoder:
    """The static model in ``folder`` (model2vec's or sentence-transformers' layout) as a :class:`StaticEncoder`."""
    from bertkit._text import read_json
    from bertkit.modeling.static import load_static
    from bertkit.sentence.static import StaticEmbedding

    emb = load_static(folder)
    static = StaticEmbedding(emb.tokenizer, embedding_weights=emb.weight.data, base_model=str(folder))
    cfg_path = Path(folder) / "config.json"
    config: dict[str, Any] = {}
    if cfg_path.is_file():
        cfg = read_json(cfg_path)
        if isinstance(cfg, dict) and cfg.get("model_type") == "model2vec":
            # the distillation's own record (apply_pca, sif_coefficient, ...); save_static writes the rest
            skip = {"model_type", "architectures", "hidden_dim", "seq_length", "normalize", "embedding_dtype"}
            config = {k: v for k, v in cfg.items() if k not in skip}
    return StaticEncoder(static, normalize=emb.normalize, config=config)


def project_teacher(teacher: np.ndarray, student: np.ndarray, normalize: bool = True) -> np.ndarray:
    """The teacher's vectors (n, H) in the student's axes (n, d): PCA to ``d`` dimensions, then the
    orthogonal rotation closest to the student's centred vectors ``student`` of the same texts
    (Procrustes), then unit length when ``normalize`` (the student's vectors are), else scaled to the
    student's size. ``d`` above ``H`` is an error naming both."""
    from bertkit.sentence.distill_static import pca

    n, width = teacher.shape
    dims = student.shape[1]
    if dims > width:
        raise ValueError(f"the student has {dims} dimensions, more than the teacher's {width}: PCA cannot add any")
    if n < 2:
        raise ValueError(f"{n} text(s): fitting to a teacher needs at least 2")
    reduced = torch.from_numpy(np.ascontiguousarray(pca(teacher, dims), dtype=np.float64))
    s = torch.from_numpy(np.asarray(student, dtype=np.float64))
    s = s - s.mean(dim=0)
    u, sv, vt = torch.linalg.svd(reduced.T @ s)
    out = reduced @ (u @ vt)
    if normalize:
        out = nn.functional.normalize(out, dim=-1)
    else:  # the scale that best maps the rotated vectors onto the student's
        out = out * (sv.sum() / (reduced**2).sum().clamp_min(1e-12))
    return out.float().numpy()


def teacher_targets(
    teacher: str | Path, texts: Sequence[str], student: Any, batch_size: int = 64, progress: bool = True
) -> np.ndarray:
    """(len(texts), student.dim) float32: the teacher's sentence vectors of ``texts`` projected into
    the student's axes (:func:`project_teacher`). ``teacher`` is a sentence model folder or id."""
    from bertkit.sentence.sentence_transformer import SentenceTransformer

    t0 = time.perf_counter()
    model = SentenceTransformer(str(teacher), device="cpu", dtype="auto")
    vectors = model.encode(list(texts), batch_size=batch_size, show_progress_bar=progress, convert_to_numpy=True)
    targets = project_teacher(np.asarray(vectors, np.float32), student.encode(texts).numpy(), student.normalize)
    print(
        f"train-embedder: the teacher's vectors of {len(texts):,} texts in {time.perf_counter() - t0:.1f} s, "
        f"projected to {targets.shape[1]} dims",
        file=sys.stderr,
    )
    return targets
