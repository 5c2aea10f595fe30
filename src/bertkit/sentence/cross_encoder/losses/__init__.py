"""sentence-transformers' cross-encoder losses (``sentence_transformers.cross_encoder.losses``) over a
bertkit :class:`~bertkit.CrossEncoder`, under the same names and constructor arguments.

Each is an ``nn.Module`` built on the model (``loss.model``) and called as sentence-transformers calls
its losses: ``loss(inputs, labels)`` with ``inputs`` one list of texts per dataset column (the
:class:`~bertkit.CrossEncoderTrainer` gives them so) and ``labels`` a tensor of one value per row. The
pairs are tokenized as the CrossEncoder cuts them (``max_length``, the longer text first) and scored
by its fp32 training model (``model.training_model``), the weights the trainer updates.

- :class:`BinaryCrossEntropyLoss`: (text, text) pairs and a 0..1 label each; BCE on the logits.
- :class:`CrossEntropyLoss`: (text, text) pairs and a class id each; cross-entropy over the head.
- :class:`MSELoss`: (text, text) pairs and a score each; squared error of the logits.
- :class:`MultipleNegativesRankingLoss`: (query, positive[, negative...]) columns, no labels needed;
  each query ranks its positive above ``num_negatives`` candidates drawn from the other rows'
  positives and negatives (torch's global RNG, as sentence-transformers draws) and its own hard negatives.
- :class:`CachedMultipleNegativesRankingLoss`: the same loss with the memory of ``mini_batch_size`` pairs
  (scores first without a graph, then again mini-batch by mini-batch in the backward pass).
- :class:`MarginMSELoss`: (query, positive, negative...) columns; the label is the teacher's margin
  (or margins, or the positive's and negatives' scores); squared error of the head's margins.

The learning-to-rank losses read listwise rows: a query, a list of documents and a list of labels (one
per document, graded or binary); lists may differ in length from row to row and are not cut.
``inputs`` is then ``[queries, docs_lists]`` and ``labels`` one tensor (or list) per row, as
sentence-transformers' data collator gives them. Each query's (query, document) pairs are scored in
forwards of ``mini_batch_size`` pairs (None: as many pairs as queries in the batch; 0 or less: all).

- :class:`ListNetLoss`: cross-entropy between the softmax of the labels and of the scores.
- :class:`LambdaLoss`: pairwise logistic losses weighed by a ``weighting_scheme`` (:class:`NoWeightingScheme`,
  :class:`NDCGLoss1Scheme`, :class:`NDCGLoss2Scheme`, :class:`LambdaRankScheme`, :class:`NDCGLoss2PPScheme`).
- :class:`RankNetLoss`: LambdaLoss without weights.
- :class:`PListMLELoss`: the Plackett-Luce likelihood of the labels' order, positions weighed by a
  :class:`PListMLELambdaWeight`; :class:`ListMLELoss`: the same unweighted.
- :class:`ADRMSELoss`: squared error between each document's label rank and its approximate (sigmoid) rank.

Each loss's ``get_config_dict()`` and ``citation`` (where sentence-transformers' loss has one) are what
sentence-transformers' loss of the same name gives for the same arguments, for a model card; the
weighting classes bertkit mirrors are named by sentence-transformers' class paths.
"""

from bertkit.sentence.cross_encoder.losses.listwise import (
    ADRMSELoss,
    LambdaLoss,
    LambdaRankScheme,
    ListMLELoss,
    ListNetLoss,
    NDCGLoss1Scheme,
    NDCGLoss2PPScheme,
    NDCGLoss2Scheme,
    NoWeightingScheme,
    PListMLELambdaWeight,
    PListMLELoss,
    RankNetLoss,
)
from bertkit.sentence.cross_encoder.losses.pointwise import (
    BinaryCrossEntropyLoss,
    CachedMultipleNegativesRankingLoss,
    CrossEntropyLoss,
    MarginMSELoss,
    MSELoss,
    MultipleNegativesRankingLoss,
)

__all__ = [
    "ADRMSELoss",
    "BinaryCrossEntropyLoss",
    "CachedMultipleNegativesRankingLoss",
    "CrossEntropyLoss",
    "LambdaLoss",
    "LambdaRankScheme",
    "ListMLELoss",
    "ListNetLoss",
    "MSELoss",
    "MarginMSELoss",
    "MultipleNegativesRankingLoss",
    "NDCGLoss1Scheme",
    "NDCGLoss2PPScheme",
    "NDCGLoss2Scheme",
    "NoWeightingScheme",
    "PListMLELambdaWeight",
    "PListMLELoss",
    "RankNetLoss",
]
