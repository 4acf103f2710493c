"""Evaluation: full-catalogue ranking (default), labelled sampled metrics, significance tests."""

from attnsvm.rec.eval.metrics import metrics_from_topk
from attnsvm.rec.eval.ranking import EvalResult, ScoreFn, evaluate, rank_topk
from attnsvm.rec.eval.sampled import sample_negatives, sampled_evaluate
from attnsvm.rec.eval.significance import compare, compare_results

__all__ = [
    "EvalResult",
    "ScoreFn",
    "compare",
    "compare_results",
    "evaluate",
    "metrics_from_topk",
    "rank_topk",
    "sample_negatives",
    "sampled_evaluate",
]
