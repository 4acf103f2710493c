"""The report's figures of one head, as PNG bytes (matplotlib, no display needed).

Per head ``L{layer}H{head}``: attention against each token score (gap to the sequence's best),
the singular spectra of the model's ``W`` and of the Att-SVMs of its selection, the margins of
the model's ``W`` on the selection's constraints, and, where the run kept attention snapshots,
the correlation of ``W`` with the final Att-SVMs over the epochs.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from attnsvm.lens.analysis import HeadAnalysis
from attnsvm.lens.extract import HeadView


def png(fig) -> bytes:
    """``fig`` as PNG bytes; the figure is closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def head_plots(a: HeadAnalysis, view: HeadView, scores: dict[str, np.ndarray]) -> dict[str, bytes]:
    """``{file name: PNG}`` of one head (see the module docstring)."""
    tag = f"L{a.layer}H{a.head}"
    out = {f"{tag}_attention_vs_score.png": _attention_vs_score(tag, view, scores)}
    out[f"{tag}_spectra.png"] = _spectra(tag, a)
    out[f"{tag}_margins.png"] = _margins(tag, a)
    if a.epochs:
        out[f"{tag}_correlation_over_epochs.png"] = _correlation_over_epochs(tag, a)
    return out


def _attention_vs_score(tag: str, view: HeadView, scores: dict[str, np.ndarray]) -> bytes:
    fig, axes = plt.subplots(1, len(scores), figsize=(4.5 * len(scores), 3.6), squeeze=False)
    for ax, (name, s) in zip(axes[0], scores.items(), strict=True):
        gap = s - np.nanmax(s, axis=1, keepdims=True)
        ax.scatter(gap[view.valid], view.attention[view.valid], s=4, alpha=0.4)
        ax.set_xlabel(f"{name} score − best score of the sequence")
        ax.set_ylabel("attention weight (last position)")
        ax.set_title(f"{tag}: attention vs {name} score")
    return png(fig)


def _spectra(tag: str, a: HeadAnalysis) -> bytes:
    fig, ax = plt.subplots(figsize=(5, 3.6))
    model = np.array(a.summary["model"]["spectrum"])
    ax.semilogy(np.arange(1, model.size + 1), np.maximum(model, 1e-16), "o-", label="model W")
    for norm, solution in a.solutions["selected"].items():
        if solution is not None:
            sigma = np.linalg.svd(solution.W, compute_uv=False)
            ax.semilogy(
                np.arange(1, sigma.size + 1),
                np.maximum(sigma / sigma[0], 1e-16),
                ".-",
                label=f"Att-SVM {norm} (selected)",
            )
    return _finish(fig, ax, "index", "σ_k / σ_1", f"{tag}: singular spectra")


def _margins(tag: str, a: HeadAnalysis) -> bytes:
    fig, ax = plt.subplots(figsize=(5, 3.6))
    fro = a.solutions["selected"]["frobenius"]
    scale = fro.objective / np.linalg.norm(a.model_W) if fro else 1.0
    ax.hist(a.model_margins * scale, bins=60)
    ax.axvline(1.0, color="k", linestyle="--", label="Att-SVM margin 1")
    xlabel = "(x_sel − x_t)ᵀ W z_i" + (", W scaled to ‖W^mm_F‖_F" if fro else "")
    return _finish(fig, ax, xlabel, "constraints", f"{tag}: margins of the model's W")


def _correlation_over_epochs(tag: str, a: HeadAnalysis) -> bytes:
    fig, ax = plt.subplots(figsize=(5, 3.6))
    epochs = [row["epoch"] for row in a.epochs]
    for norm in ("frobenius", "nuclear"):
        if norm in a.epochs[0]:
            ax.plot(epochs, [row[norm] for row in a.epochs], "o-", label=f"corr(W, W^mm {norm})")
    title = f"{tag}: correlation to the final Att-SVM over training"
    return _finish(fig, ax, "epoch", "correlation", title)


def _finish(fig, ax, xlabel: str, ylabel: str, title: str) -> bytes:
    """Label a one-panel figure, add its legend, and return it as PNG bytes."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return png(fig)
