"""sentence-transformers' losses under their own names, for ``SentenceTransformer.fit``.

A sentence-transformers training script switches with its import line::

    from bertkit import InputExample, SentenceTransformer, losses

    model = SentenceTransformer(folder)
    loss = losses.CoSENTLoss(model)
    model.fit(train_objectives=[(DataLoader(examples, shuffle=True, batch_size=16), loss)], epochs=1)

Each loss is an ``nn.Module`` whose ``forward(sentence_features, labels)`` embeds every column with
``model(features)["sentence_embedding"]`` (with gradients) and returns the loss sentence-transformers
returns. Each computes its value in ``compute_loss_from_embeddings`` with a formula of
:mod:`bertkit.sentence.losses.functional` (the functions ``bertkit train-embedder`` trains with too), and
refuses, by name, settings bertkit does not compute.

Labels are what each loss reads: scores (CoSENT, AnglE), 1/0 (the contrastive losses), class ids (the
batch triplet losses, over one text column), a teacher's vectors (MSELoss, EmbedDistillLoss: one per
row, or one per column) or scores (MarginMSELoss, DistillKLDivLoss). ``fit`` and
``SentenceTransformerTrainer`` check a dataset's labels against the loss (:meth:`_Loss.check_labels`)
before the first step. The losses bertkit does not compute (DenoisingAutoEncoderLoss, the
ContrastiveTension losses, AdaptiveLayerLoss, Matryoshka2dLoss) keep their names here, and constructing
one raises NotImplementedError saying why.

Each loss's ``get_config_dict()`` and ``citation`` are what sentence-transformers' loss of the same name
gives for the same arguments (a model card records them): names as it writes them (``"cos_sim"``,
``"TripletDistanceMetric.EUCLIDEAN"``, an inner loss's class name, torch class paths) and its BibTeX text.

The classes live in modules by family: :mod:`~bertkit.sentence.losses.in_batch` (in-batch negatives),
:mod:`~bertkit.sentence.losses.pairs` (pairs and triplets), :mod:`~bertkit.sentence.losses.distillation`,
:mod:`~bertkit.sentence.losses.regularization`, :mod:`~bertkit.sentence.losses.wrappers` (Matryoshka) and
:mod:`~bertkit.sentence.losses.unsupported`.
"""

from bertkit.sentence.losses.distillation import DistillKLDivLoss, EmbedDistillLoss, MarginMSELoss, MSELoss
from bertkit.sentence.losses.in_batch import (
    CachedGISTEmbedLoss,
    CachedMultipleNegativesRankingLoss,
    CachedMultipleNegativesSymmetricRankingLoss,
    GISTEmbedLoss,
    MegaBatchMarginLoss,
    MultipleNegativesRankingLoss,
    MultipleNegativesSymmetricRankingLoss,
)
from bertkit.sentence.losses.pairs import (
    AnglELoss,
    BatchAllTripletLoss,
    BatchHardSoftMarginTripletLoss,
    BatchHardTripletLoss,
    BatchHardTripletLossDistanceFunction,
    BatchSemiHardTripletLoss,
    ContrastiveLoss,
    CoSENTLoss,
    CosineSimilarityLoss,
    OnlineContrastiveLoss,
    SiameseDistanceMetric,
    SoftmaxLoss,
    TripletDistanceMetric,
    TripletLoss,
)
from bertkit.sentence.losses.regularization import GlobalOrthogonalRegularizationLoss
from bertkit.sentence.losses.unsupported import (
    AdaptiveLayerLoss,
    ContrastiveTensionDataLoader,
    ContrastiveTensionLoss,
    ContrastiveTensionLossInBatchNegatives,
    DenoisingAutoEncoderLoss,
    Matryoshka2dLoss,
)
from bertkit.sentence.losses.wrappers import MatryoshkaLoss

__all__ = [
    "AdaptiveLayerLoss",
    "AnglELoss",
    "BatchAllTripletLoss",
    "BatchHardSoftMarginTripletLoss",
    "BatchHardTripletLoss",
    "BatchHardTripletLossDistanceFunction",
    "BatchSemiHardTripletLoss",
    "CachedGISTEmbedLoss",
    "CachedMultipleNegativesRankingLoss",
    "CachedMultipleNegativesSymmetricRankingLoss",
    "CoSENTLoss",
    "ContrastiveLoss",
    "ContrastiveTensionDataLoader",
    "ContrastiveTensionLoss",
    "ContrastiveTensionLossInBatchNegatives",
    "CosineSimilarityLoss",
    "DenoisingAutoEncoderLoss",
    "DistillKLDivLoss",
    "EmbedDistillLoss",
    "GISTEmbedLoss",
    "GlobalOrthogonalRegularizationLoss",
    "MSELoss",
    "MarginMSELoss",
    "Matryoshka2dLoss",
    "MatryoshkaLoss",
    "MegaBatchMarginLoss",
    "MultipleNegativesRankingLoss",
    "MultipleNegativesSymmetricRankingLoss",
    "OnlineContrastiveLoss",
    "SiameseDistanceMetric",
    "SoftmaxLoss",
    "TripletDistanceMetric",
    "TripletLoss",
]
