"""A head's attention read as an Att-SVM (theory.md §2): selection, optimality, max-margin fit.

Per sequence the selected token (``argmax`` attention) is **globally optimal** (it is the
score's argmax), **locally optimal** (it beats every SVM-neighbour in score, theory.md §2.5,
the neighbours from the Frobenius Att-SVM of the selection) or **neither**. The Att-SVMs of the
selected and of the optimal tokens are solved by ``attnsvm.lens.solve``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from attnsvm.lens.solve import NORMS, RANK_RTOL, SOFT_MARGIN_C, Pairs, Solution, solve
from attnsvm.theory import svm
from attnsvm.theory.tokens import locally_optimal_sequences

CLASSES = ("global", "local", "neither")


def masked_argmax(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``argmax`` over the real tokens of each row (first position on ties)."""
    return np.argmax(np.where(valid, values, -np.inf), axis=1)


def classify(
    scores: np.ndarray, valid: np.ndarray, selected: np.ndarray, neighbours: np.ndarray
) -> np.ndarray:
    """Per sequence ``"global"``, ``"local"`` or ``"neither"`` (see the module docstring)."""
    optimal = masked_argmax(scores, valid)
    finite = np.where(valid, scores, np.nanmin(np.where(valid, scores, np.inf)) - 1.0)
    local = locally_optimal_sequences(finite, selected, neighbours & valid)
    return np.where(selected == optimal, "global", np.where(local, "local", "neither"))


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {}
    q = np.quantile(values, [0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0])
    return dict(zip(("min", "p05", "p25", "median", "p75", "p95", "max"), q.tolist(), strict=True))


@dataclass
class HeadAnalysis:
    """Everything the report shows about one head; ``summary`` is its JSON form."""

    layer: int
    head: int
    selected: np.ndarray  # (n,)
    optimal: dict[str, np.ndarray]  # score name → (n,)
    classes: dict[str, np.ndarray]  # score name → (n,) "global" | "local" | "neither"
    solutions: dict[str, dict[str, Solution]]  # selection name → norm → solution
    model_W: np.ndarray  # the head's W_selection
    model_margins: np.ndarray  # (N,) (x_sel − x_t)ᵀ W z under the model's W, selected pairs
    pairs: Pairs  # constraints of the selected tokens
    epochs: list[dict] = field(default_factory=list)  # epoch → correlation to final solutions
    summary: dict = field(default_factory=dict)


def analyse_head(
    view,
    scores: dict[str, np.ndarray],
    *,
    C: float = SOFT_MARGIN_C,
    snapshots: list[tuple[int, np.ndarray]] = (),
    step: Callable[[str], None] = lambda _: None,
) -> HeadAnalysis:
    """Selection vs optimal tokens and the Att-SVMs of one head.

    ``view``: a ``HeadView`` (or anything with ``X``, ``Z``, ``valid``, ``attention``,
    ``W_selection``, ``layer``, ``head``); ``scores``: name → ``(n, L)`` token scores (NaN at
    padding); ``snapshots``: ``(epoch, W_selection)`` over training; ``step(description)`` is
    called before every solve (a progress bar).
    """
    X, Z, valid = view.X, view.Z, view.valid
    selected = masked_argmax(view.attention, valid)
    optimal = {name: masked_argmax(s, valid) for name, s in scores.items()}
    selections = {"selected": selected}
    for name, alpha in optimal.items():
        same = next((k for k, a in selections.items() if np.array_equal(a, alpha)), None)
        selections[f"optimal_{name}"] = selections[same] if same else alpha
    pairs = Pairs.build(X, Z, valid, selected)
    solutions: dict[str, dict[str, Solution]] = {}
    cache: dict[bytes, dict[str, Solution]] = {}
    for name, alpha in selections.items():
        key = alpha.tobytes()
        if key not in cache:
            problem = pairs if name == "selected" else Pairs.build(X, Z, valid, alpha)
            step(f"L{view.layer}H{view.head} {name}")
            cache[key] = (
                solve(problem, C, view.W_selection) if len(problem) else dict.fromkeys(NORMS)
            )
        solutions[name] = cache[key]
    shape = valid.shape
    fro_selected = solutions["selected"]["frobenius"]
    neighbours = fro_selected.neighbours(pairs, shape) if fro_selected else np.zeros(shape, bool)
    classes = {name: classify(s, valid, selected, neighbours) for name, s in scores.items()}
    model_W = view.W_selection
    analysis = HeadAnalysis(
        view.layer,
        view.head,
        selected,
        optimal,
        classes,
        solutions,
        model_W,
        pairs.margins(model_W),
        pairs,
    )
    analysis.epochs = _epochs(snapshots, solutions["selected"])
    analysis.summary = _summary(analysis, view, neighbours)
    return analysis


def _epochs(snapshots, final: dict[str, Solution]) -> list[dict]:
    rows = []
    for epoch, W in snapshots:
        row = {"epoch": int(epoch)}
        for norm, solution in final.items():
            if solution is not None:
                row[norm] = svm.correlation(W, solution.W)
        rows.append(row)
    return rows


def _summary(a: HeadAnalysis, view, neighbours: np.ndarray) -> dict:
    n = len(a.selected)
    sigma = np.linalg.svd(a.model_W, compute_uv=False)
    fro = a.solutions["selected"]["frobenius"]
    scaled = a.model_margins * (fro.objective / np.linalg.norm(a.model_W)) if fro else None
    out = {
        "layer": a.layer,
        "head": a.head,
        "sequences": n,
        "tokens_per_sequence": float(view.valid.sum(1).mean()),
        "constraints": len(a.pairs),
        "attention_on_selected": _quantiles(view.attention[np.arange(n), a.selected]),
        "model": {
            "frobenius_norm": float(sigma @ sigma) ** 0.5,
            "nuclear_norm": float(sigma.sum()),
            "rank": int(np.sum(sigma > RANK_RTOL * sigma[0])),
            "spectrum": (sigma / sigma[0]).tolist(),
        },
        "margins": {
            "model": _quantiles(a.model_margins),
            "model_scaled_to_frobenius_svm_norm": _quantiles(scaled) if fro else {},
        },
        "neighbours_per_sequence": float(neighbours.sum(1).mean()),
        "scores": {},
        "svm": {
            name: {norm: s.summary(a.model_W) if s else None for norm, s in by_norm.items()}
            for name, by_norm in a.solutions.items()
        },
        "epochs": a.epochs,
        "per_sequence": {"selected": a.selected.tolist()},
    }
    for name, classes in a.classes.items():
        out["scores"][name] = {
            "selected_is_optimal": float(np.mean(a.selected == a.optimal[name])),
            "classes": {c: int(np.sum(classes == c)) for c in CLASSES},
        }
        out["per_sequence"][f"optimal_{name}"] = a.optimal[name].tolist()
        out["per_sequence"][f"class_{name}"] = classes.tolist()
    return out
