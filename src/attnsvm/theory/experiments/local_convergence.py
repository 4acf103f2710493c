"""local_converge.ipynb (theory.md §3.3): GD from a random init converges in direction to the
Att-SVM of the tokens it ends up selecting (W -> Frobenius, (K,Q) -> nuclear norm)."""

from __future__ import annotations

import time

import numpy as np

from attnsvm.theory.attention import AttentionProblem
from attnsvm.theory.dynamics import default_init, train
from attnsvm.theory.experiments._result import ExperimentResult, quantiles
from attnsvm.theory.experiments._svms import SVMCache
from attnsvm.theory.instances import paper_instances

#: Init generators are seeded ``INIT_SEED_OFFSET + seed`` (the notebook's init is unseeded).
INIT_SEED_OFFSET = 10_000
PAIRS = {
    "W_fro": ("W", "fro"),
    "KQ_nuc": ("KQ", "nuc"),
    "W_nuc": ("W", "nuc"),
    "KQ_fro": ("KQ", "fro"),
}

NOTES = [
    "The notebook's saved figure plots corr(W_GD, W^mm_F) and, labelled (K,Q), corr(W_GD, "
    "W^mm_*) (cell 4 uses idx=0); here panel (b) shows what the README describes: W_GD vs "
    "W^mm_F and KQ_GD vs W^mm_*, with the two cross-correlations dashed.",
    "Nuclear-norm SVMs are solved accurately (interior point on the reduced SDP), not with "
    "cvxpy's default SCS; Frobenius SVMs exactly (Wolfe min-norm point); all statuses are "
    "checked and infeasible selections are counted, not dropped.",
    "The init is PyTorch's nn.Linear law from a generator seeded 10000 + seed; the notebook "
    "uses the unseeded global RNG, so runs are comparable in distribution, not bit for bit.",
    "The loss is the stable softplus form and gradients are closed-form (a pairwise form that "
    "keeps the cancellation in g - sum(s g) out of float64) and batched over seeds. Against a "
    "60-digit reference they are accurate to about 4e-15 at every step of a 1,000-step run, "
    "while autograd's softmax backward, as the notebook computes it, loses precision once the "
    "softmax saturates (relative error 2e-2 at step 1,000 on instance 0; "
    "tests/theory/test_attention.py). The notebook's trajectories therefore drift from the "
    "exact ones, and the comparison with them is statistical.",
]


def run(
    seeds: int = 100,
    *,
    n: int = 6,
    T: int = 8,
    d: int = 10,
    steps: int = 2000,
    progress: bool = False,
) -> ExperimentResult:
    """Train both parameterisations on ``seeds`` instances; correlate with the SVMs of their
    final selections. Acceptance: theory.md §3.3 (a)-(f)."""
    start = time.perf_counter()
    inst = paper_instances(range(seeds), n, T, d)
    problem = AttentionProblem.from_instances(inst)
    init_seeds = range(INIT_SEED_OFFSET, INIT_SEED_OFFSET + seeds)
    every = range(0, steps + 1, 10)
    traj = {
        p: train(
            problem,
            default_init(init_seeds, d, p),
            steps=steps,
            checkpoints=every,
            progress=progress,
        )
        for p in ("W", "KQ")
    }
    svms = SVMCache(inst)
    curves, feasible = {}, {}
    for name, (param, norm) in PAIRS.items():
        ref = svms.directions(traj[param].selected(), norm)
        feasible[name] = np.isfinite(ref).all(axis=(1, 2))
        curves[name] = traj[param].correlations(ref)
    thin = 10 if steps >= 1000 else 1  # results.json keeps every 100th step of the curves
    half = traj["W"].at(min(1000, steps))
    opt = inst.optimal()
    fro_ranks = [
        svms.get(s, a, "fro").rank()
        for s, a in enumerate(traj["W"].selected())
        if svms.get(s, a, "fro").feasible
    ]
    metrics = {
        "final": {k: quantiles(c[:, -1]) for k, c in curves.items()},
        "at_1000": {k: quantiles(c[:, half]) for k, c in curves.items()},
        "max_prob": {
            p: {
                str(k): float(t.max_prob[:, k].mean())
                for k in (100, 200, 500, steps - 1)
                if k < steps
            }
            for p, t in traj.items()
        },
        "frac_alpha_opt": {
            p: float(np.mean((t.selected() == opt).all(-1))) for p, t in traj.items()
        },
        "frac_same_alpha": float(np.mean((traj["W"].selected() == traj["KQ"].selected()).all(-1))),
        "infeasible_selections": {k: int((~f).sum()) for k, f in feasible.items()},
        "rank_fro_mean": float(np.mean(fro_ranks)) if fro_ranks else float("nan"),
        "norm_W_final_median": {
            p: float(np.median(np.linalg.norm(t.final_W, axis=(-2, -1)))) for p, t in traj.items()
        },
        "curves": {
            "iterations": traj["W"].checkpoints[::thin],
            **{k: np.nanmean(c, 0)[::thin].round(6) for k, c in curves.items()},
        },
    }
    final = metrics["final"]
    checks = {
        "a: W vs Fro median >= 0.99, p10 >= 0.98": final["W_fro"]["median"] >= 0.99
        and final["W_fro"]["p10"] >= 0.98,
        "b: KQ vs nuclear median >= 0.99, p10 >= 0.98": final["KQ_nuc"]["median"] >= 0.99
        and final["KQ_nuc"]["p10"] >= 0.98,
        "c: cross-correlation medians <= 0.95": final["W_nuc"]["median"] <= 0.95
        and final["KQ_fro"]["median"] <= 0.95,
    }
    if steps >= 1000:
        checks["d: max prob >= 0.99 at 500 (W) and 100 (KQ)"] = (
            metrics["max_prob"]["W"]["500"] >= 0.99 and metrics["max_prob"]["KQ"]["100"] >= 0.99
        )
        checks["e: W vs Fro median at 1000 >= 0.98"] = metrics["at_1000"]["W_fro"]["median"] >= 0.98
    if seeds >= 100:
        checks["f: fraction alpha = opt (W) in [0.45, 0.95]"] = (
            0.45 <= metrics["frac_alpha_opt"]["W"] <= 0.95
        )
    config = {
        "seeds": seeds,
        "n": n,
        "T": T,
        "d": d,
        "steps": steps,
        "lr": 0.1,
        "init": "nn.Linear U(-1/sqrt(d), 1/sqrt(d)), seed 10000+seed",
    }
    return ExperimentResult(
        "local-convergence",
        config,
        metrics,
        checks,
        NOTES,
        time.perf_counter() - start,
        {"local_convergence.png": _plotter(traj, curves, steps)},
    )


def _plotter(traj, curves, steps):
    def plot(fig):
        shown = min(steps, 1000)
        ax1, ax2 = fig.subplots(1, 2)
        x = np.arange(shown + 1)
        for p, color in (("W", "tab:blue"), ("KQ", "tab:red")):
            trace = traj[p].max_prob[:, : shown + 1]
            mean, std = trace.mean(0), trace.std(0)
            ax1.plot(x[: len(mean)], mean, color=color, label=p)
            ax1.fill_between(x[: len(mean)], mean - std, mean + std, color=color, alpha=0.2)
        ax1.set(xlabel="iteration", ylabel="mean_i max_t s_it", title="(a) softmax probability")
        ax1.legend()
        its = traj["W"].checkpoints
        keep = its <= shown
        styles = {
            "W_fro": ("tab:blue", "-", "W vs W^mm_F"),
            "KQ_nuc": ("tab:red", "-", "(K,Q) vs W^mm_*"),
            "W_nuc": ("tab:blue", "--", "W vs W^mm_* (cross)"),
            "KQ_fro": ("tab:red", "--", "(K,Q) vs W^mm_F (cross)"),
        }
        for k, (color, ls, label) in styles.items():
            mean, std = np.nanmean(curves[k], 0)[keep], np.nanstd(curves[k], 0)[keep]
            ax2.plot(its[keep], mean, color=color, ls=ls, label=label)
            if ls == "-":
                ax2.fill_between(its[keep], mean - std, mean + std, color=color, alpha=0.2)
        ax2.set(xlabel="iteration", ylabel="correlation", title="(b) correlation to the SVMs")
        ax2.legend(fontsize=8)

    return plot
