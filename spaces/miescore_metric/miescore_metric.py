# Copyright 2026 The MIEScore authors. Apache-2.0.
"""MIEScore `evaluate` metric: correlation with MIE-Bench MOS, and MER-Bench K-pair group accuracy.

A thin wrapper: every number comes from `modeling_miescore.evaluation.metrics` (the `miescore` package), so results
match the library exactly.

Keep one import per line: evaluate's dependency scanner (evaluate/loading.py:get_imports) reads
`import a, b` as a package called "a,". It imports every top-level package named here before loading
this file; the "# From:" comment after the library import only sets the name shown in its
"please pip install ..." message (the distribution is `miescore`, the import name `modeling_miescore`).
"""

import datasets
import evaluate
import numpy as np

from modeling_miescore.data.schema import DIMENSIONS  # From: miescore
from modeling_miescore.data.schema import MOS_COLUMNS  # From: miescore
from modeling_miescore.evaluation.metrics.correlation import correlations  # From: miescore
from modeling_miescore.evaluation.metrics.group_ranking import group_accuracy  # From: miescore
from modeling_miescore.evaluation.metrics.group_ranking import kendall_tau_groups  # From: miescore
from modeling_miescore.hub.miescore_overall import overall_score  # From: miescore


_CITATION = """\
@article{miescore2026,
  title   = {MIEScore: Human-Aligned Evaluation for Multi-Source Image Editing},
  year    = {2026},
  note    = {MIE-Bench and MIEScore; https://github.com/IntMeGroup/MIEScore}
}
@article{long2026spatialreward,
  title   = {SpatialReward: Bridging the Perception Gap in Online RL for Image Editing via Explicit Spatial Reasoning},
  author  = {Long, Yancheng and Yang, Yankai and Wei, Hongyang and others},
  journal = {arXiv preprint arXiv:2602.07458},
  year    = {2026}
}
"""

_DESCRIPTION = """\
Human-alignment metrics for multi-source image editing evaluators.

Config "default" (MIE-Bench): predictions and references are [VQ, IF, AP] triples (visual quality,
instruction following, attribute preservation) per edited image. Returns SRCC, KRCC and PLCC per
dimension and for the overall score VQ^0.3 * IF^0.4 * AP^0.3 (MIEScore paper, eq. 2), as in the paper's
table 3, plus PLCC after a monotonic 4-parameter logistic fit.

Config "mer_bench" (MER-Bench, SpatialReward paper): predictions are lists of predicted scores per
group, candidates in human order (best first). A group is correct only if its scores are strictly
decreasing (equal scores are wrong). Returns group accuracy and mean per-group Kendall tau, overall and
per group size (2/3/4-pair).
"""

_KWARGS_DESCRIPTION = """
Args (config "default"):
    predictions: list of [vq, if, ap] predicted scores, one triple per edited image, or the dicts returned
        by MIEScoreModel.score / score_batch ({"visual_quality", "instruction_following",
        "attribute_preservation", ...}; other keys such as "overall" are ignored).
    references: list of [vq, if, ap] MOS triples (same order), e.g. MIE-Bench mos_vq, mos_if, mos_ap, or
        dicts with those keys (MIE-Bench rows). Required.
    nan_policy: "raise" (default) or "omit" (drop items with a NaN, per dimension).
    logistic: also report PLCC after the 4-parameter logistic fit (default True).
Returns (config "default"):
    {dim}_srcc, {dim}_krcc, {dim}_plcc, {dim}_plcc_logistic for dim in vq, if, ap, overall; and n.

Args (config "mer_bench"):
    predictions: list of groups; each group lists the predicted scores of its candidates in human
        order, best first (2, 3 or 4 candidates on MER-Bench). No references: the order is the label.
    categories: optional list with one category label per group (e.g. General, Human-Body, Human-Face).
    tie_score: score of a tied pair in Kendall tau, 0 (default: plain tau-a), -1 (discordant) or 1
        (the reference code's stable-sort behaviour).
Returns (config "mer_bench"):
    accuracy, kendall_tau, n_groups, and per group size K: accuracy_{K}pair, kendall_tau_{K}pair,
    n_groups_{K}pair; with categories also by_category: {category: {accuracy, kendall_tau, n_groups}}.

Examples:
    >>> import evaluate
    >>> metric = evaluate.load("spaces/miescore_metric")
    >>> out = metric.compute(predictions=[[50, 60, 55], [40, 45, 42], [70, 72, 68], [30, 20, 35], [44, 55, 66]],
    ...                      references=[[52, 58, 50], [35, 47, 44], [66, 75, 70], [33, 25, 30], [40, 50, 60]])
    >>> round(out["if_srcc"], 3)
    1.0
    >>> mer = evaluate.load("spaces/miescore_metric", "mer_bench")
    >>> mer.compute(predictions=[[0.9, 0.2], [0.1, 0.5, 0.3], [3, 2, 2, 1]])["accuracy"]
    0.3333333333333333
"""

_CONFIGS = ("default", "mer_bench")
_DIMENSIONS = ("vq", "if", "ap")


def _triples(rows, name):
    """``rows`` as [VQ, IF, AP] lists: a dict is read by the score names (MIEScoreModel.score / score_batch output)
    or by the MIE-Bench MOS columns; anything else is passed on for evaluate's own format check."""
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            out.append(row)
            continue
        keys = next((keys for keys in (DIMENSIONS, MOS_COLUMNS) if all(k in row for k in keys)), None)
        if keys is None:
            raise ValueError(
                f"{name}[{i}] is a dict with keys {sorted(row)}; a dict needs the keys {list(DIMENSIONS)} (the "
                f"output of MIEScoreModel.score / score_batch) or {list(MOS_COLUMNS)} (a MIE-Bench row), or pass "
                "[vq, if, ap] lists"
            )
        out.append([row[k] for k in keys])
    return out


def _triples_pair(predictions, references):
    """Check that the default config got both inputs (or neither: compute after add_batch) and convert dicts."""
    if (predictions is None) != (references is None):
        missing = "references" if references is None else "predictions"
        raise ValueError(
            f"the default config compares predictions with human MOS, but {missing} is missing: pass "
            "predictions=[[vq, if, ap], ...] (or the dicts of MIEScoreModel.score_batch) and references=[[mos_vq, "
            "mos_if, mos_ap], ...], one per edited image; for MER-Bench group scores load the 'mer_bench' config"
        )
    if predictions is None:
        return None, None
    return _triples(predictions, "predictions"), _triples(references, "references")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MiescoreMetric(evaluate.Metric):
    """MIE-Bench correlations (config "default") and MER-Bench group accuracy (config "mer_bench")."""

    def _info(self):
        if self.config_name not in _CONFIGS:
            raise KeyError(f"unknown config {self.config_name!r}; choose one of {list(_CONFIGS)}")
        if self.config_name == "mer_bench":
            features = datasets.Features({"predictions": datasets.List(datasets.Value("float64"))})
        else:
            triple = datasets.List(datasets.Value("float64"), length=3)
            features = datasets.Features({"predictions": triple, "references": triple})
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=features,
            codebase_urls=["https://github.com/IntMeGroup/MIEScore"],
            reference_urls=["https://arxiv.org/abs/2602.07458"],
        )

    # evaluate appends the inputs description to the docstrings of compute, add_batch and add, so they must exist.
    def compute(self, *, predictions=None, references=None, **kwargs):
        """Compute the metric; the mer_bench config refuses references (the candidate order is the label).
        """
        if self.config_name == "mer_bench" and references is not None:
            raise ValueError(
                "the mer_bench config takes no references: pass predictions as per-group score lists in "
                "human order (best first); put the candidates in that order before calling compute"
            )
        if self.config_name != "mer_bench":
            predictions, references = _triples_pair(predictions, references)
        return super().compute(predictions=predictions, references=references, **kwargs)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add a batch; in the default config score dicts become [VQ, IF, AP] triples.
        """
        if self.config_name != "mer_bench":
            predictions, references = _triples_pair(predictions, references)
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one item; in the default config a score dict becomes a [VQ, IF, AP] triple.
        """
        if self.config_name != "mer_bench":
            rows = _triples_pair(None if prediction is None else [prediction],
                                 None if reference is None else [reference])
            prediction, reference = (None if r is None else r[0] for r in rows)
        return super().add(prediction=prediction, reference=reference, **kwargs)

    def _compute(self, predictions, references=None, **kwargs):
        if self.config_name == "mer_bench":
            return self._compute_mer_bench(predictions, **kwargs)
        return self._compute_correlations(predictions, references, **kwargs)

    def _compute_correlations(self, predictions, references, nan_policy="raise", logistic=True):
        pred = np.asarray(predictions, dtype=np.float64).reshape(-1, 3)
        ref = np.asarray(references, dtype=np.float64).reshape(-1, 3)
        columns = {dim: (pred[:, i], ref[:, i]) for i, dim in enumerate(_DIMENSIONS)}
        # MIEScore paper eq. 2, for predictions and MOS alike.
        columns["overall"] = (overall_score(*pred.T), overall_score(*ref.T))
        out = {}
        for dim, (p, r) in columns.items():
            values = correlations(p, r, nan_policy=nan_policy, logistic=logistic)
            out.update({f"{dim}_{name}": value for name, value in values.items()})
        out["n"] = int(pred.shape[0])
        return out

    def _compute_mer_bench(self, predictions, categories=None, tie_score=0.0):
        groups = [list(g) for g in predictions]
        acc = group_accuracy(groups, categories=categories)
        tau = kendall_tau_groups(groups, categories=categories, tie_score=tie_score)
        out = {"accuracy": acc["overall"], "kendall_tau": tau["overall"], "n_groups": acc["n_groups"]}
        for k in acc["by_size"]:
            out[f"accuracy_{k}pair"] = acc["by_size"][k]
            out[f"kendall_tau_{k}pair"] = tau["by_size"][k]
            out[f"n_groups_{k}pair"] = acc["n_by_size"][k]
        if categories is not None:
            out["by_category"] = {
                cat: {
                    "accuracy": acc["by_category"][cat],
                    "kendall_tau": tau["by_category"][cat],
                    "n_groups": acc["n_by_category"][cat],
                }
                for cat in acc["by_category"]
            }
        return out
