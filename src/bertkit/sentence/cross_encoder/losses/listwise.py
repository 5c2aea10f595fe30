"""The listwise (learning-to-rank) cross-encoder losses and the weighting classes they take."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from bertkit.sentence.cross_encoder.losses.base import CrossEncoderLoss, _short, is_score
from bertkit.sentence.losses.base import _fullname


class _ListwiseLoss(CrossEncoderLoss):
    """What the learning-to-rank losses share: (query, [documents]) rows with one label per document,
    each query's pairs scored ``mini_batch_size`` pairs a forward, and the scores and labels laid out
    as (queries, longest list) matrices, the short lists padded."""

    listwise = True

    def __init__(
        self, model: Any, activation_fn: nn.Module | None = nn.Identity(), mini_batch_size: int | None = None
    ) -> None:
        super().__init__(model)
        self.activation_fn = activation_fn or nn.Identity()
        self.mini_batch_size = mini_batch_size
        if model.num_labels != 1:
            raise ValueError(
                f"{type(self).__name__} supports a model with 1 output label, "
                f"but got a model with {model.num_labels} output labels."
            )

    def find_problem(
        self, texts: Sequence[Sequence[Any]], labels: Sequence[Any] | None
    ) -> tuple[int | None, int, str] | None:
        name = type(self).__name__
        queries, docs_lists = texts[0], texts[1]
        for i, query in enumerate(queries):
            if not isinstance(query, str):
                return 0, i, f"not a query text: {name} reads rows (query, [documents]) with a list of labels"
        for i, docs in enumerate(docs_lists):
            if isinstance(docs, str) or not isinstance(docs, Sequence):
                return 1, i, f"not a list of documents: {name} reads rows (query, [documents]) with a list of labels"
            if not docs:
                return 1, i, f"an empty list of documents: {name} needs at least one document per query"
            for j, doc in enumerate(docs):
                if not isinstance(doc, str):
                    return 1, i, f"a list whose item {j} is {type(doc).__name__} ({_short(doc)}), not a document text"
        for i, (label, docs) in enumerate(zip(labels or [], docs_lists)):
            label = label.tolist() if isinstance(label, Tensor) else label
            if isinstance(label, str) or not isinstance(label, Sequence):
                return None, i, "not a list of labels, one per document of the row"
            if len(label) != len(docs):
                return None, i, f"{len(label)} labels for the row's {len(docs)} documents"
            if not all(is_score(x) for x in label):
                return None, i, "not a list of finite numbers"
        return None

    def _lists(
        self, inputs: Sequence[Any], labels: Any, prompt: Any, task: Any
    ) -> tuple[list[str], list[list[str]], Tensor]:
        """The batch's queries, document lists and their labels end to end, checked as
        sentence-transformers checks them (and an empty or non-list documents entry refused)."""
        name = type(self).__name__
        if prompt is not None or task is not None:
            raise ValueError(f"{name}: prompt= and task= are not supported by bertkit's CrossEncoder")
        if labels is None:
            raise ValueError(f"{name} needs labels: give the dataset a column with a list of labels per query")
        if isinstance(labels, Tensor):
            raise ValueError(
                f"{name} expects a list of labels for each sample, but got a single value for each sample."
            )
        if len(inputs) != 2:
            raise ValueError(f"{name} expects two inputs (queries, documents_list), but got {len(inputs)} inputs.")
        queries, docs_list = list(inputs[0]), []
        for i, docs in enumerate(inputs[1]):
            if isinstance(docs, str) or not isinstance(docs, Sequence) or not docs:
                raise ValueError(f"{name}: documents of query {i} are {docs!r}, not a non-empty list of texts")
            docs_list.append(list(docs))
        docs_per_query = [len(docs) for docs in docs_list]
        if docs_per_query != [len(lbls) for lbls in labels]:
            raise ValueError(
                f"{name}: number of documents per query in inputs ({docs_per_query}) does not match number of "
                f"labels per query ({[len(lbls) for lbls in labels]})."
            )
        flat = torch.cat([torch.as_tensor(lbls) for lbls in labels], dim=0).float()
        return queries, docs_list, flat

    def list_logits(self, queries: list[str], docs_list: list[list[str]]) -> Tensor:
        """Every (query, document) pair's score, query after query, through ``activation_fn``: the pairs
        go ``mini_batch_size`` at a time (None: as many as queries; 0 or less: all at once)."""
        pairs = [(query, doc) for query, docs in zip(queries, docs_list) for doc in docs]
        size = self.mini_batch_size or len(queries)
        if size <= 0:
            size = len(pairs)
        parts = []
        for i in range(0, len(pairs), size):
            chunk = pairs[i : i + size]
            parts.append(self.scores([q for q, _ in chunk], [d for _, d in chunk]).view(-1))
        return self.activation_fn(torch.cat(parts, dim=0).float())

    def _matrices(
        self,
        inputs: list[Any],
        labels: list[Tensor],
        prompt: str | None,
        task: str | None,
        logit_fill: float,
        label_fill: float,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The batch's scores and labels as (queries, longest list) matrices, each shorter list padded
        with ``logit_fill`` and ``label_fill``, and the mask of the real documents."""
        queries, docs_list, flat_labels = self._lists(inputs, labels, prompt, task)
        logits = self.list_logits(queries, docs_list)
        per_query = [len(docs) for docs in docs_list]
        cols = torch.cat([torch.arange(n) for n in per_query], dim=0)
        rows = torch.repeat_interleave(torch.arange(len(docs_list)), torch.tensor(per_query))
        shape, device = (len(queries), max(per_query)), logits.device
        logits_matrix = torch.full(shape, logit_fill, device=device)
        logits_matrix[rows, cols] = logits
        labels_matrix = torch.full(shape, label_fill, device=device)
        labels_matrix[rows, cols] = flat_labels.to(device)
        mask = torch.zeros(shape, dtype=torch.bool, device=device)
        mask[rows, cols] = True
        return logits_matrix, labels_matrix, mask

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers records for this loss."""
        return {"activation_fn": _fullname(self.activation_fn), "mini_batch_size": self.mini_batch_size}


class ListNetLoss(_ListwiseLoss):
    """sentence-transformers' ``ListNetLoss``: per query, the cross-entropy between the softmax of the
    labels and the softmax of the scores (after ``activation_fn``), averaged over the queries; padding
    of the shorter lists takes no part."""

    def forward(
        self, inputs: list[Any], labels: list[Tensor], prompt: str | None = None, task: str | None = None
    ) -> Tensor:
        """The mean ListNet loss of one batch: ``inputs`` [queries, documents lists], ``labels`` a list per query."""
        # a padded score of -1e16 has zero probability; a padded label of -inf has zero target probability
        logits_matrix, labels_matrix, _ = self._matrices(inputs, labels, prompt, task, -1e16, float("-inf"))
        return nn.functional.cross_entropy(logits_matrix, labels_matrix.softmax(dim=1))

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _CAO2007_LISTNET


class BaseWeightingScheme(nn.Module):
    """A LambdaLoss weighting scheme: weights of the document pairs from the normalized gains, the
    position discounts and the labels in the order of the scores."""

    def forward(self, gain: Tensor, discount: Tensor, true_sorted: Tensor) -> Tensor:
        """The weights (broadcastable to queries x positions x positions)."""
        raise NotImplementedError


class NoWeightingScheme(BaseWeightingScheme):
    """Every pair weighs 1 (RankNet)."""

    def forward(self, gain: Tensor, discount: Tensor, true_sorted: Tensor) -> Tensor:
        return torch.tensor(1.0, device=gain.device)


class NDCGLoss1Scheme(BaseWeightingScheme):
    """NDCG Loss1: a pair weighs the gain of its first document over that document's discount."""

    def forward(self, gain: Tensor, discount: Tensor, true_sorted: Tensor) -> Tensor:
        return (gain / discount)[:, :, None]


class NDCGLoss2Scheme(BaseWeightingScheme):
    """NDCG Loss2: the gain difference times the discount difference of positions |i - j| apart."""

    def forward(self, gain: Tensor, discount: Tensor, true_sorted: Tensor) -> Tensor:
        pos_idxs = torch.arange(1, gain.shape[1] + 1, device=gain.device)
        delta_idxs = torch.abs(pos_idxs[:, None] - pos_idxs[None, :])
        # the diagonal's delta 0 reads index -1; it is zeroed below
        deltas = torch.abs(
            torch.pow(torch.abs(discount[0, delta_idxs - 1]), -1.0)
            - torch.pow(torch.abs(discount[0, delta_idxs]), -1.0)
        )
        deltas.diagonal().zero_()
        return deltas[None, :, :] * torch.abs(gain[:, :, None] - gain[:, None, :])


class LambdaRankScheme(BaseWeightingScheme):
    """LambdaRank: the gain difference times the difference of the two positions' inverse discounts."""

    def forward(self, gain: Tensor, discount: Tensor, true_sorted: Tensor) -> Tensor:
        return torch.abs(torch.pow(discount[:, :, None], -1.0) - torch.pow(discount[:, None, :], -1.0)) * torch.abs(
            gain[:, :, None] - gain[:, None, :]
        )


class NDCGLoss2PPScheme(BaseWeightingScheme):
    """NDCG Loss2++: ``mu`` times NDCG Loss2's weights plus LambdaRank's."""

    def __init__(self, mu: float = 10.0) -> None:
        super().__init__()
        self.mu = mu
        self.ndcg_loss2 = NDCGLoss2Scheme()
        self.lambda_rank = LambdaRankScheme()

    def forward(self, gain: Tensor, discount: Tensor, true_sorted: Tensor) -> Tensor:
        ndcg_weights = self.ndcg_loss2(gain, discount, true_sorted)
        lambda_weights = self.lambda_rank(gain, discount, true_sorted)
        return self.mu * ndcg_weights + lambda_weights


class LambdaLoss(_ListwiseLoss):
    """sentence-transformers' ``LambdaLoss``: for each query, the documents ordered by score; every pair
    whose first document has the higher label (any pair for NDCGLoss1Scheme), with one of the two in
    the top ``k`` (None: all), adds -weight * log sigmoid(``sigma`` * score difference), in bits when
    ``reduction_log`` is "binary"; the loss is the mean over those pairs. The weights come from
    ``weighting_scheme`` (None: :class:`NoWeightingScheme`) over NDCG gains normalized by the ideal DCG
    (at least ``eps``); negative labels count as 0 in the gains."""

    def __init__(
        self,
        model: Any,
        weighting_scheme: BaseWeightingScheme | None = NDCGLoss2PPScheme(),
        k: int | None = None,
        sigma: float = 1.0,
        eps: float = 1e-10,
        reduction_log: str = "binary",
        activation_fn: nn.Module | None = nn.Identity(),
        mini_batch_size: int | None = None,
    ) -> None:
        super().__init__(model, activation_fn, mini_batch_size)
        if reduction_log not in ("natural", "binary"):
            raise ValueError(f"{type(self).__name__}: reduction_log={reduction_log!r} is not 'natural' or 'binary'")
        self.weighting_scheme = weighting_scheme or NoWeightingScheme()
        self.k = k
        self.sigma = sigma
        self.eps = eps
        self.reduction_log = reduction_log

    def forward(
        self, inputs: list[Any], labels: list[Tensor], prompt: str | None = None, task: str | None = None
    ) -> Tensor:
        """The LambdaLoss of one batch: ``inputs`` [queries, documents lists], ``labels`` a list per query."""
        logits_matrix, labels_matrix, _ = self._matrices(inputs, labels, prompt, task, -1e16, float("-inf"))
        device, max_docs = logits_matrix.device, logits_matrix.shape[1]

        logits_sorted, indices_pred = logits_matrix.sort(descending=True, dim=-1)
        labels_sorted, _ = labels_matrix.sort(descending=True, dim=-1)
        true_sorted_by_preds = torch.gather(labels_matrix, dim=1, index=indices_pred)
        true_diffs = true_sorted_by_preds[:, :, None] - true_sorted_by_preds[:, None, :]
        # a pair with a padded document has a non-finite label difference
        pairs_mask = torch.isfinite(true_diffs)
        if not isinstance(self.weighting_scheme, NDCGLoss1Scheme):
            pairs_mask = pairs_mask & (true_diffs > 0)
        k = self.k or max_docs
        top_k_mask = torch.zeros((max_docs, max_docs), dtype=torch.bool, device=device)
        top_k_mask[:k, :] = 1
        top_k_mask[:, :k] = 1

        true_sorted_by_preds.clamp_(min=0.0)
        labels_sorted.clamp_(min=0.0)
        pos_idxs = torch.arange(1, max_docs + 1).to(device)
        discount = torch.log2(1.0 + pos_idxs.float())[None, :]
        max_dcgs = torch.sum(((torch.pow(2, labels_sorted) - 1) / discount)[:, :k], dim=-1).clamp(min=self.eps)
        gain = (torch.pow(2, true_sorted_by_preds) - 1) / max_dcgs[:, None]
        weights = self.weighting_scheme(gain, discount, true_sorted_by_preds)

        # log-sigmoid of the differences itself (not the log of a sigmoid) keeps the gradients of
        # badly misordered pairs; the padded -1e16 scores give differences to clamp and NaNs to clear
        scores_diffs = (logits_sorted[:, :, None] - logits_sorted[:, None, :]).clamp(min=-1e8, max=1e8)
        scores_diffs.masked_fill_(torch.isnan(scores_diffs), 0.0)
        losses = weights * nn.functional.logsigmoid(self.sigma * scores_diffs)
        if self.reduction_log == "binary":
            losses = losses / math.log(2)
        masked = losses[pairs_mask & top_k_mask]
        return -masked.sum() / max(masked.numel(), 1)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers records for this loss."""
        return {
            "weighting_scheme": _class_path(self.weighting_scheme),
            "k": self.k,
            "sigma": self.sigma,
            "eps": self.eps,
            "reduction_log": self.reduction_log,
            "activation_fn": _fullname(self.activation_fn),
            "mini_batch_size": self.mini_batch_size,
        }

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _WANG2018_LAMBDALOSS


class RankNetLoss(LambdaLoss):
    """sentence-transformers' ``RankNetLoss``: :class:`LambdaLoss` with every pair weighing 1."""

    def __init__(
        self,
        model: Any,
        k: int | None = None,
        sigma: float = 1.0,
        eps: float = 1e-10,
        reduction_log: str = "binary",
        activation_fn: nn.Module | None = nn.Identity(),
        mini_batch_size: int | None = None,
    ) -> None:
        super().__init__(
            model,
            weighting_scheme=NoWeightingScheme(),
            k=k,
            sigma=sigma,
            eps=eps,
            reduction_log=reduction_log,
            activation_fn=activation_fn,
            mini_batch_size=mini_batch_size,
        )

    def get_config_dict(self) -> dict[str, Any]:
        config = super().get_config_dict()
        del config["weighting_scheme"]
        return config

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _BURGES2005_RANKNET


class PListMLELambdaWeight(nn.Module):
    """Position weights of :class:`PListMLELoss`: ``rank_discount_fn(mask)`` when given, else
    2^(documents - rank) - 1 for ranks 1, 2, ... of each list (0 on padding)."""

    def __init__(self, rank_discount_fn: Any = None) -> None:
        super().__init__()
        self.rank_discount_fn = rank_discount_fn

    def forward(self, mask: Tensor) -> Tensor:
        """The weights (queries, positions) of the valid positions ``mask``."""
        if self.rank_discount_fn is not None:
            return self.rank_discount_fn(mask)
        num_docs_per_query = mask.sum(dim=1, keepdim=True)
        ranks = torch.arange(1, mask.size(1) + 1, device=mask.device).expand_as(mask)
        # long lists: both terms scaled by 2^-scale keeps every power within float range, and the
        # weights are normalized per list afterwards
        scale = (num_docs_per_query - 127).clamp_min(0)
        weights = torch.pow(2.0, num_docs_per_query - ranks - scale) - torch.pow(2.0, -scale)
        return weights * mask


class PListMLELoss(_ListwiseLoss):
    """sentence-transformers' ``PListMLELoss``: minus the Plackett-Luce log-likelihood of each list's
    order (the input order when ``respect_input_order``, else the labels' descending order), each
    position's term weighed by ``lambda_weight`` normalized to sum 1 per list (None: unweighted, which
    is ListMLE); the mean over the queries."""

    def __init__(
        self,
        model: Any,
        lambda_weight: PListMLELambdaWeight | None = PListMLELambdaWeight(),
        activation_fn: nn.Module | None = nn.Identity(),
        mini_batch_size: int | None = None,
        respect_input_order: bool = True,
    ) -> None:
        super().__init__(model, activation_fn, mini_batch_size)
        self.lambda_weight = lambda_weight
        self.respect_input_order = respect_input_order
        self.eps = 1e-10

    def forward(
        self, inputs: list[Any], labels: list[Tensor], prompt: str | None = None, task: str | None = None
    ) -> Tensor:
        """The mean (P)ListMLE loss of one batch: ``inputs`` [queries, documents lists], ``labels`` a list per query."""
        logits_matrix, labels_matrix, mask = self._matrices(inputs, labels, prompt, task, 1e-16, float("-inf"))
        device = logits_matrix.device

        if not self.respect_input_order:
            # padding (label -inf) stays at the end of each list
            _, indices = labels_matrix.sort(descending=True, dim=1)
            sorted_logits = torch.gather(logits_matrix, 1, indices)
            sorted_mask = torch.gather(mask, 1, indices)
        else:
            sorted_logits, sorted_mask = logits_matrix, mask
        # log of each position's softmax over itself and the positions after it
        scores = sorted_logits.masked_fill(~sorted_mask, torch.finfo(sorted_logits.dtype).min)
        log_normalizers = torch.flip(torch.logcumsumexp(torch.flip(scores, [1]), dim=1), [1])
        log_probs = sorted_logits - log_normalizers
        if self.lambda_weight is not None:
            weights = self.lambda_weight(mask)
            weights = weights / (weights.sum(dim=1, keepdim=True) + self.eps)
            log_probs = log_probs * weights
        log_probs[~sorted_mask] = 0.0
        per_query = -torch.sum(log_probs, dim=1)
        if not torch.any(per_query):
            return torch.tensor(0.0, device=device, requires_grad=True)
        return torch.mean(per_query)

    def get_config_dict(self) -> dict[str, Any]:
        """The settings sentence-transformers records for this loss."""
        return {
            "lambda_weight": None if self.lambda_weight is None else _class_path(self.lambda_weight),
            "activation_fn": _fullname(self.activation_fn),
            "mini_batch_size": self.mini_batch_size,
            "respect_input_order": self.respect_input_order,
        }

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _LAN2014_PLISTMLE


class ListMLELoss(PListMLELoss):
    """sentence-transformers' ``ListMLELoss``: :class:`PListMLELoss` without position weights."""

    def __init__(
        self,
        model: Any,
        activation_fn: nn.Module | None = nn.Identity(),
        mini_batch_size: int | None = None,
        respect_input_order: bool = True,
    ) -> None:
        super().__init__(
            model,
            lambda_weight=None,
            activation_fn=activation_fn,
            mini_batch_size=mini_batch_size,
            respect_input_order=respect_input_order,
        )

    def get_config_dict(self) -> dict[str, Any]:
        config = super().get_config_dict()
        del config["lambda_weight"]
        return config

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _XIA2008_LISTMLE


class ADRMSELoss(_ListwiseLoss):
    """sentence-transformers' ``ADRMSELoss``: per document, the squared difference between its rank by
    label (ties share their mean rank) and its approximate rank 1 + sum of sigmoid(``alpha`` * (s_j - s_i))
    over the other documents, discounted by 1 / log2(1 + label rank); the mean over all documents."""

    def __init__(
        self,
        model: Any,
        alpha: float = 1.0,
        activation_fn: nn.Module | None = nn.Identity(),
        mini_batch_size: int | None = None,
    ) -> None:
        super().__init__(model, activation_fn, mini_batch_size)
        self.alpha = alpha

    def approximate_ranks(self, scores: Tensor, mask: Tensor) -> Tensor:
        """Each document's differentiable rank among the valid ones (higher score, lower rank)."""
        score_diffs = scores.unsqueeze(1) - scores.unsqueeze(2)
        pairwise = torch.sigmoid(self.alpha * score_diffs) * mask.unsqueeze(1).float()
        # a valid document's own term is sigmoid(0) = 0.5
        return 1.0 + pairwise.sum(dim=2) - 0.5 * mask.float()

    def forward(
        self, inputs: list[Any], labels: list[Tensor], prompt: str | None = None, task: str | None = None
    ) -> Tensor:
        """The mean discounted squared rank error of one batch."""
        logits_matrix, labels_matrix, mask = self._matrices(inputs, labels, prompt, task, -1e16, 0.0)

        labels_j, labels_i, valid_j = labels_matrix.unsqueeze(1), labels_matrix.unsqueeze(2), mask.unsqueeze(1)
        greater = ((labels_j > labels_i) & valid_j).sum(dim=-1).float()
        equal = ((labels_j == labels_i) & valid_j).sum(dim=-1).float()
        true_ranks = greater + (equal + 1.0) / 2.0
        approx_ranks = self.approximate_ranks(logits_matrix, mask)
        loss = (1.0 / torch.log2(true_ranks + 1.0)) * (true_ranks - approx_ranks) ** 2
        loss = loss * mask.float()
        return loss.sum() / mask.sum()

    def get_config_dict(self) -> dict[str, Any]:
        config = super().get_config_dict()
        return {"alpha": self.alpha, **config}

    @property
    def citation(self) -> str | None:
        """The BibTeX entry sentence-transformers' model card cites for this loss."""
        return _SCHLATT2025_RANKDISTILLM


# sentence-transformers' modules of the weighting classes bertkit mirrors under the same names: the model
# card names the class a script of either library builds alike
_ST_CLASS_MODULES = {
    BaseWeightingScheme: "lambda_loss",
    NoWeightingScheme: "lambda_loss",
    NDCGLoss1Scheme: "lambda_loss",
    NDCGLoss2Scheme: "lambda_loss",
    LambdaRankScheme: "lambda_loss",
    NDCGLoss2PPScheme: "lambda_loss",
    PListMLELambdaWeight: "plist_mle",
}


def _class_path(obj: Any) -> str:
    """The dotted class name of ``obj`` as sentence-transformers writes it: its own path for the
    weighting classes bertkit mirrors, else the class's own path."""
    module = _ST_CLASS_MODULES.get(type(obj))
    if module is None:
        return _fullname(obj)
    return f"sentence_transformers.cross_encoder.losses.{module}.{type(obj).__name__}"


# -- citations: the BibTeX entries sentence-transformers' model card lists, character for character -------

_BURGES2005_RANKNET = """
@inproceedings{burges2005learning,
  title={Learning to Rank using Gradient Descent},
  author={Burges, Chris and Shaked, Tal and Renshaw, Erin and Lazier, Ari and Deeds, Matt and Hamilton, Nicole and Hullender, Greg},
  booktitle={Proceedings of the 22nd international conference on Machine learning},
  pages={89--96},
  year={2005}
}
"""  # noqa: E501 (the entry as sentence-transformers writes it)
_CAO2007_LISTNET = """
@inproceedings{cao2007learning,
    title={Learning to Rank: From Pairwise Approach to Listwise Approach},
    author={Cao, Zhe and Qin, Tao and Liu, Tie-Yan and Tsai, Ming-Feng and Li, Hang},
    booktitle={Proceedings of the 24th international conference on Machine learning},
    pages={129--136},
    year={2007}
}
"""
_LAN2014_PLISTMLE = """
@inproceedings{lan2014position,
  title={Position-Aware ListMLE: A Sequential Learning Process for Ranking},
  author={Lan, Yanyan and Zhu, Yadong and Guo, Jiafeng and Niu, Shuzi and Cheng, Xueqi},
  booktitle={UAI},
  volume={14},
  pages={449--458},
  year={2014}
}
"""
_SCHLATT2025_RANKDISTILLM = """
@inproceedings{schlatt2025rankdistillm,
    title={Rank-DistiLLM: Closing the Effectiveness Gap Between Cross-Encoders and LLMs for Passage Re-ranking},
    author={Schlatt, Ferdinand and Fröbe, Maik and Scells, Harrisen and Zhuang, Shengyao and Koopman, Bevan and Zuccon, Guido and Stein, Benno and Potthast, Martin and Hagen, Matthias},
    booktitle={Advances in Information Retrieval (ECIR 2025)},
    year={2025},
    doi={10.1007/978-3-031-88714-7_31},
}
"""  # noqa: E501 (the entry as sentence-transformers writes it)
_WANG2018_LAMBDALOSS = """
@inproceedings{wang2018lambdaloss,
  title={The LambdaLoss Framework for Ranking Metric Optimization},
  author={Wang, Xuanhui and Li, Cheng and Golbandi, Nadav and Bendersky, Michael and Najork, Marc},
  booktitle={Proceedings of the 27th ACM international conference on information and knowledge management},
  pages={1313--1322},
  year={2018}
}
"""
_XIA2008_LISTMLE = """
@inproceedings{10.1145/1390156.1390306,
    title = {Listwise Approach to Learning to Rank - Theory and Algorithm},
    author = {Xia, Fen and Liu, Tie-Yan and Wang, Jue and Zhang, Wensheng and Li, Hang},
    booktitle = {Proceedings of the 25th International Conference on Machine Learning},
    pages = {1192-1199},
    year = {2008},
    url = {https://doi.org/10.1145/1390156.1390306},
}
"""
