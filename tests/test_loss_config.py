"""Every loss bertkit builds, bi-encoder (``bertkit.losses``) and cross-encoder
(``bertkit.cross_encoder.losses``), records the settings and the citation sentence-transformers 6.2's
loss of the same name records for the same constructor arguments: ``get_config_dict()`` equal, value
for value and type for type (the same ``repr``, as a model card writes 20 and 20.0 apart), and
``citation`` equal (None on both sides where sentence-transformers' loss has none). Both sides are
built on real models: the MiniLM folder for the bi-encoders, a seeded one-label MiniLM head for the
cross-encoders; the arguments are the defaults and at least one set of other values per loss. The
losses bertkit refuses to build need nothing and are checked to refuse."""

import pytest
import torch

st = pytest.importorskip("sentence_transformers")
from sentence_transformers import util as st_util  # noqa: E402
from sentence_transformers.cross_encoder import losses as cel  # noqa: E402
from sentence_transformers.sentence_transformer import losses as stl  # noqa: E402
from test_cross_encoder_listwise import _fn, head1, pair  # noqa: F401 (fixtures used by name)
from test_sentence_transformer_fit import LENGTH  # noqa: E402
from test_st_losses_more import _guide, models  # noqa: F401 (models is a fixture used by name)

from bertkit import losses, util  # noqa: E402
from bertkit.cross_encoder import losses as ce_losses  # noqa: E402

nn = torch.nn


def _custom_distance(x, y):
    return (x - y).abs().max(-1).values


def _custom_matrix(embeddings):
    return torch.cdist(embeddings, embeddings, p=1)


# loss name -> [(case, build(L, U, model, guide))]: L is the losses module, U the util module, of one side
BI_CASES = {
    "MultipleNegativesRankingLoss": [
        ("default", lambda L, U, m, g: L.MultipleNegativesRankingLoss(m)),
        ("scale10-dot", lambda L, U, m, g: L.MultipleNegativesRankingLoss(m, scale=10, similarity_fct=U.dot_score)),
        (
            "symmetric-strength",
            lambda L, U, m, g: L.MultipleNegativesRankingLoss(
                m,
                similarity_fct=m.similarity,
                directions=("doc_to_query", "query_to_doc"),
                partition_mode="per_direction",
                hardness_strength=0.5,
            ),
        ),
    ],
    "MultipleNegativesSymmetricRankingLoss": [
        ("default", lambda L, U, m, g: L.MultipleNegativesSymmetricRankingLoss(m)),
        ("scale5-dot", lambda L, U, m, g: L.MultipleNegativesSymmetricRankingLoss(m, 5, U.dot_score)),
    ],
    "CachedMultipleNegativesRankingLoss": [
        ("default", lambda L, U, m, g: L.CachedMultipleNegativesRankingLoss(m)),
        (
            "scale30-dot-mini8",
            lambda L, U, m, g: L.CachedMultipleNegativesRankingLoss(
                m, scale=30, similarity_fct=U.dot_score, mini_batch_size=8
            ),
        ),
        (
            "symmetric",
            lambda L, U, m, g: L.CachedMultipleNegativesRankingLoss(
                m, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"
            ),
        ),
    ],
    "CachedMultipleNegativesSymmetricRankingLoss": [
        ("default", lambda L, U, m, g: L.CachedMultipleNegativesSymmetricRankingLoss(m)),
        (
            "scale7.5-mini4",
            lambda L, U, m, g: L.CachedMultipleNegativesSymmetricRankingLoss(
                m, scale=7.5, similarity_fct=U.dot_score, mini_batch_size=4
            ),
        ),
    ],
    "CoSENTLoss": [
        ("default", lambda L, U, m, g: L.CoSENTLoss(m)),
        ("scale10-dot", lambda L, U, m, g: L.CoSENTLoss(m, scale=10, similarity_fct=U.pairwise_dot_score)),
    ],
    "AnglELoss": [
        ("default", lambda L, U, m, g: L.AnglELoss(m)),
        ("scale30", lambda L, U, m, g: L.AnglELoss(m, scale=30)),
    ],
    "CosineSimilarityLoss": [
        ("default", lambda L, U, m, g: L.CosineSimilarityLoss(m)),
        (
            "l1-relu",
            lambda L, U, m, g: L.CosineSimilarityLoss(m, loss_fct=nn.L1Loss(), cos_score_transformation=nn.ReLU()),
        ),
    ],
    "TripletLoss": [
        ("default", lambda L, U, m, g: L.TripletLoss(m)),
        ("cosine-0.5", lambda L, U, m, g: L.TripletLoss(m, L.TripletDistanceMetric.COSINE, triplet_margin=0.5)),
        ("manhattan", lambda L, U, m, g: L.TripletLoss(m, distance_metric=L.TripletDistanceMetric.MANHATTAN)),
        ("custom", lambda L, U, m, g: L.TripletLoss(m, distance_metric=_custom_distance, triplet_margin=1.0)),
    ],
    "MatryoshkaLoss": [
        ("default-mnrl", lambda L, U, m, g: L.MatryoshkaLoss(m, L.MultipleNegativesRankingLoss(m), [384, 128, 32])),
        (
            "cosent-unsorted-weights",
            lambda L, U, m, g: L.MatryoshkaLoss(
                m, L.CoSENTLoss(m), [32, 384, 128], [0.25, 1.0, 0.5], n_dims_per_step=5
            ),
        ),
    ],
    "SoftmaxLoss": [
        ("default", lambda L, U, m, g: L.SoftmaxLoss(m, embedding_dimension=384, num_labels=3)),
        (
            "multiplication",
            lambda L, U, m, g: L.SoftmaxLoss(
                m,
                384,
                2,
                concatenation_sent_rep=False,
                concatenation_sent_difference=True,
                concatenation_sent_multiplication=True,
                loss_fct=nn.CrossEntropyLoss(label_smoothing=0.1),
            ),
        ),
    ],
    "EmbedDistillLoss": [
        ("default", lambda L, U, m, g: L.EmbedDistillLoss(m)),
        ("l2-projection", lambda L, U, m, g: L.EmbedDistillLoss(m, "l2", projection_dim=64)),
        ("mse", lambda L, U, m, g: L.EmbedDistillLoss(m, distance_metric="mse")),
    ],
    "MSELoss": [
        ("default", lambda L, U, m, g: L.MSELoss(m)),
        ("projection", lambda L, U, m, g: L.MSELoss(m, projection_dim=64)),
    ],
    "MarginMSELoss": [
        ("default", lambda L, U, m, g: L.MarginMSELoss(m)),
        ("cosine", lambda L, U, m, g: L.MarginMSELoss(m, U.pairwise_cos_sim)),
        ("pairwise-method", lambda L, U, m, g: L.MarginMSELoss(m, similarity_fct=m.similarity_pairwise)),
    ],
    "DistillKLDivLoss": [
        ("default", lambda L, U, m, g: L.DistillKLDivLoss(m)),
        ("cosine-t2", lambda L, U, m, g: L.DistillKLDivLoss(m, similarity_fct=U.pairwise_cos_sim, temperature=2.0)),
        (
            "student-teacher",
            lambda L, U, m, g: L.DistillKLDivLoss(m, student_temperature=0.5, teacher_temperature=3),
        ),
        ("student-same", lambda L, U, m, g: L.DistillKLDivLoss(m, temperature=2.0, student_temperature=2.0)),
    ],
    "ContrastiveLoss": [
        ("default", lambda L, U, m, g: L.ContrastiveLoss(m)),
        (
            "euclidean-1-sum",
            lambda L, U, m, g: L.ContrastiveLoss(m, L.SiameseDistanceMetric.EUCLIDEAN, margin=1, size_average=False),
        ),
        ("custom", lambda L, U, m, g: L.ContrastiveLoss(m, distance_metric=_custom_distance)),
    ],
    "OnlineContrastiveLoss": [
        ("default", lambda L, U, m, g: L.OnlineContrastiveLoss(m)),
        ("manhattan-2", lambda L, U, m, g: L.OnlineContrastiveLoss(m, L.SiameseDistanceMetric.MANHATTAN, margin=2)),
    ],
    "BatchHardTripletLoss": [
        ("default", lambda L, U, m, g: L.BatchHardTripletLoss(m)),
        (
            "cosine-1",
            lambda L, U, m, g: L.BatchHardTripletLoss(m, L.BatchHardTripletLossDistanceFunction.cosine_distance, 1),
        ),
        ("custom", lambda L, U, m, g: L.BatchHardTripletLoss(m, distance_metric=_custom_matrix, margin=0.5)),
    ],
    "BatchHardSoftMarginTripletLoss": [
        ("default", lambda L, U, m, g: L.BatchHardSoftMarginTripletLoss(m)),
        (
            "cosine",
            lambda L, U, m, g: L.BatchHardSoftMarginTripletLoss(
                m, distance_metric=L.BatchHardTripletLossDistanceFunction.cosine_distance
            ),
        ),
    ],
    "BatchAllTripletLoss": [
        ("default", lambda L, U, m, g: L.BatchAllTripletLoss(m)),
        (
            "cosine-2",
            lambda L, U, m, g: L.BatchAllTripletLoss(m, L.BatchHardTripletLossDistanceFunction.cosine_distance, 2.0),
        ),
    ],
    "BatchSemiHardTripletLoss": [
        ("default", lambda L, U, m, g: L.BatchSemiHardTripletLoss(m)),
        (
            "cosine-0.5",
            lambda L, U, m, g: L.BatchSemiHardTripletLoss(
                m, distance_metric=L.BatchHardTripletLossDistanceFunction.cosine_distance, margin=0.5
            ),
        ),
    ],
    "MegaBatchMarginLoss": [
        ("default", lambda L, U, m, g: L.MegaBatchMarginLoss(m)),
        (
            "plain-mini10",
            lambda L, U, m, g: L.MegaBatchMarginLoss(
                m, positive_margin=0.9, negative_margin=0.2, use_mini_batched_version=False, mini_batch_size=10
            ),
        ),
    ],
    "GlobalOrthogonalRegularizationLoss": [
        ("default", lambda L, U, m, g: L.GlobalOrthogonalRegularizationLoss(m)),
        (
            "dot-sum",
            lambda L, U, m, g: L.GlobalOrthogonalRegularizationLoss(
                m, similarity_fct=U.dot_score, mean_weight=0.5, second_moment_weight=None, aggregation="sum"
            ),
        ),
    ],
    "GISTEmbedLoss": [
        ("default", lambda L, U, m, g: L.GISTEmbedLoss(m, g)),
        (
            "relative",
            lambda L, U, m, g: L.GISTEmbedLoss(
                m,
                g,
                temperature=0.05,
                margin_strategy="relative",
                margin=0.1,
                contrast_anchors=False,
                contrast_positives=False,
            ),
        ),
    ],
    "CachedGISTEmbedLoss": [
        ("default", lambda L, U, m, g: L.CachedGISTEmbedLoss(m, g)),
        (
            "relative-mini8",
            lambda L, U, m, g: L.CachedGISTEmbedLoss(
                m,
                g,
                temperature=0.02,
                mini_batch_size=8,
                margin_strategy="relative",
                margin=0.05,
                contrast_positives=False,
            ),
        ),
    ],
}

# names in bertkit.losses.__all__ that are no loss (distance functions, a data loader)
BI_HELPERS = {
    "BatchHardTripletLossDistanceFunction",
    "SiameseDistanceMetric",
    "TripletDistanceMetric",
    "ContrastiveTensionDataLoader",
}
BI_REFUSED = {
    "AdaptiveLayerLoss",
    "ContrastiveTensionLoss",
    "ContrastiveTensionLossInBatchNegatives",
    "DenoisingAutoEncoderLoss",
    "Matryoshka2dLoss",
}

CE_CASES = {
    "BinaryCrossEntropyLoss": [
        ("default", lambda L, m: L.BinaryCrossEntropyLoss(m)),
        (
            "sigmoid-pos-weight",
            lambda L, m: L.BinaryCrossEntropyLoss(m, activation_fn=nn.Sigmoid(), pos_weight=torch.tensor(2.0)),
        ),
    ],
    "CrossEntropyLoss": [
        ("default", lambda L, m: L.CrossEntropyLoss(m)),
        ("tanh-smoothing", lambda L, m: L.CrossEntropyLoss(m, activation_fn=nn.Tanh(), label_smoothing=0.1)),
    ],
    "MSELoss": [
        ("default", lambda L, m: L.MSELoss(m)),
        ("sigmoid", lambda L, m: L.MSELoss(m, activation_fn=nn.Sigmoid())),
    ],
    "MultipleNegativesRankingLoss": [
        ("default", lambda L, m: L.MultipleNegativesRankingLoss(m)),
        ("all-no-activation", lambda L, m: L.MultipleNegativesRankingLoss(m, None, 5, activation_fn=None)),
        ("two-tanh", lambda L, m: L.MultipleNegativesRankingLoss(m, num_negatives=2, activation_fn=nn.Tanh())),
    ],
    "CachedMultipleNegativesRankingLoss": [
        ("default", lambda L, m: L.CachedMultipleNegativesRankingLoss(m)),
        (
            "three-mini4",
            lambda L, m: L.CachedMultipleNegativesRankingLoss(
                m, num_negatives=3, scale=20.0, activation_fn=nn.Identity(), mini_batch_size=4
            ),
        ),
    ],
    "MarginMSELoss": [
        ("default", lambda L, m: L.MarginMSELoss(m)),
        ("sigmoid", lambda L, m: L.MarginMSELoss(m, activation_fn=nn.Sigmoid())),
    ],
    "ListNetLoss": [
        ("default", lambda L, m: L.ListNetLoss(m)),
        ("sigmoid-mini3", lambda L, m: L.ListNetLoss(m, activation_fn=nn.Sigmoid(), mini_batch_size=3)),
    ],
    "LambdaLoss": [
        ("default", lambda L, m: L.LambdaLoss(m)),
        ("ndcg2pp-mu3-k2", lambda L, m: L.LambdaLoss(m, weighting_scheme=L.NDCGLoss2PPScheme(mu=3.0), k=2)),
        ("ndcg1", lambda L, m: L.LambdaLoss(m, weighting_scheme=L.NDCGLoss1Scheme())),
        ("ndcg2", lambda L, m: L.LambdaLoss(m, weighting_scheme=L.NDCGLoss2Scheme())),
        ("lambdarank", lambda L, m: L.LambdaLoss(m, weighting_scheme=L.LambdaRankScheme())),
        (
            "none-natural",
            lambda L, m: L.LambdaLoss(
                m,
                weighting_scheme=None,
                k=3,
                sigma=2.0,
                eps=1e-8,
                reduction_log="natural",
                activation_fn=nn.Sigmoid(),
                mini_batch_size=4,
            ),
        ),
    ],
    "RankNetLoss": [
        ("default", lambda L, m: L.RankNetLoss(m)),
        (
            "natural-sigmoid",
            lambda L, m: L.RankNetLoss(
                m, k=3, sigma=0.5, eps=1e-6, reduction_log="natural", activation_fn=nn.Sigmoid(), mini_batch_size=2
            ),
        ),
    ],
    "PListMLELoss": [
        ("default", lambda L, m: L.PListMLELoss(m)),
        ("unweighted", lambda L, m: L.PListMLELoss(m, lambda_weight=None, mini_batch_size=0)),
        (
            "rank-fn-by-labels",
            lambda L, m: L.PListMLELoss(
                m, lambda_weight=L.PListMLELambdaWeight(_fn), activation_fn=nn.Sigmoid(), respect_input_order=False
            ),
        ),
    ],
    "ListMLELoss": [
        ("default", lambda L, m: L.ListMLELoss(m)),
        (
            "sigmoid-by-labels",
            lambda L, m: L.ListMLELoss(m, activation_fn=nn.Sigmoid(), mini_batch_size=2, respect_input_order=False),
        ),
    ],
    "ADRMSELoss": [
        ("default", lambda L, m: L.ADRMSELoss(m)),
        ("alpha3-mini5", lambda L, m: L.ADRMSELoss(m, alpha=3.0, activation_fn=nn.Sigmoid(), mini_batch_size=5)),
    ],
}

# names in bertkit.cross_encoder.losses.__all__ that are no loss (LambdaLoss's and PListMLELoss's weights)
CE_HELPERS = {
    "LambdaRankScheme",
    "NDCGLoss1Scheme",
    "NDCGLoss2PPScheme",
    "NDCGLoss2Scheme",
    "NoWeightingScheme",
    "PListMLELambdaWeight",
}


def _assert_same_record(theirs, ours, name):
    """The same settings (equal and of the same types: the same repr) and the same citation; a loss of
    sentence-transformers' without get_config_dict (none of its classes gives it one) records nothing."""
    want = theirs.get_config_dict() if hasattr(theirs, "get_config_dict") else {}
    got = ours.get_config_dict()
    assert got == want, name
    assert repr(got) == repr(want), name
    assert getattr(ours, "citation", None) == getattr(theirs, "citation", None), name


def _params(table):
    return [pytest.param(name, case, id=f"{name}-{case}") for name, cases in table.items() for case, _ in cases]


@pytest.mark.filterwarnings("ignore:The (Cached)?MultipleNegativesSymmetricRankingLoss is deprecated")
@pytest.mark.parametrize("name,case", _params(BI_CASES))
def test_bi_encoder_loss_records_what_sentence_transformers_records(models, name, case):
    ref, ours = models
    build = dict(BI_CASES[name])[case]
    guide = _guide("st", LENGTH)  # one object on both sides: the record holds the guide itself
    theirs = build(stl, st_util, ref, guide)
    mine = build(losses, util, ours, guide)
    assert type(theirs).__name__ == type(mine).__name__ == name
    _assert_same_record(theirs, mine, f"{name} {case}")


@pytest.mark.parametrize("name,case", _params(CE_CASES))
def test_cross_encoder_loss_records_what_sentence_transformers_records(pair, name, case):
    ref, ours = pair
    build = dict(CE_CASES[name])[case]
    theirs, mine = build(cel, ref), build(ce_losses, ours)
    assert type(theirs).__name__ == type(mine).__name__ == name
    _assert_same_record(theirs, mine, f"{name} {case}")


def test_every_loss_bertkit_builds_is_checked_with_other_arguments_too(models):
    """The cases above cover every public loss bertkit builds, each with its defaults and at least one
    other set of arguments; the others in ``__all__`` are no loss, or losses bertkit refuses to build."""
    assert set(BI_CASES) | BI_HELPERS | BI_REFUSED == set(losses.__all__)
    assert not set(BI_CASES) & (BI_HELPERS | BI_REFUSED)
    assert set(CE_CASES) | CE_HELPERS == set(ce_losses.__all__)
    assert not set(CE_CASES) & CE_HELPERS
    for cases in (*BI_CASES.values(), *CE_CASES.values()):
        assert len(cases) >= 2 and cases[0][0].startswith("default")
    _, ours = models
    for name in BI_REFUSED:
        with pytest.raises(NotImplementedError, match="not supported"):
            getattr(losses, name)(ours)


def test_sentence_transformers_distances_and_weights_given_to_bertkit_keep_their_names(models, pair):
    """sentence-transformers' own distance functions and weighting objects, given to bertkit's losses
    (which take any such callable), are recorded as sentence-transformers records them."""
    ref, ours = models
    for metric in ("COSINE", "EUCLIDEAN", "MANHATTAN"):
        fn = getattr(stl.TripletDistanceMetric, metric)
        _assert_same_record(stl.TripletLoss(ref, fn), losses.TripletLoss(ours, fn), metric)
    for metric in ("COSINE_DISTANCE", "EUCLIDEAN", "MANHATTAN"):
        fn = getattr(stl.SiameseDistanceMetric, metric)
        _assert_same_record(stl.ContrastiveLoss(ref, fn), losses.ContrastiveLoss(ours, fn), metric)
        _assert_same_record(stl.OnlineContrastiveLoss(ref, fn), losses.OnlineContrastiveLoss(ours, fn), metric)
    fn = stl.BatchHardTripletLossDistanceFunction.cosine_distance
    _assert_same_record(stl.BatchHardTripletLoss(ref, fn), losses.BatchHardTripletLoss(ours, fn), "batch")
    cross_ref, cross_ours = pair
    scheme = cel.NDCGLoss2Scheme()
    _assert_same_record(cel.LambdaLoss(cross_ref, scheme), ce_losses.LambdaLoss(cross_ours, scheme), "scheme")
