"""multi_token_converge.ipynb (theory.md §3.4, §3.7): with a ReLU head GD may select several
tokens per sequence, and W_GD follows the SVM-equivalence W^fin + R W^mm(O) (§2.8).

Candidates are seeds 1, 2, ... (as in the notebook), trained in batches; a candidate is rejected
if all Y = +1, if some softmax entry lies in (1e-6, 1e-3] ("mid"), if no entry is <= 1e-6
("nothing masked"), or if an SVM is infeasible. The first ``runs`` accepted seeds are kept.
"""

from __future__ import annotations

import math
import time

import numpy as np

from attnsvm.theory.attention import AttentionProblem
from attnsvm.theory.dynamics import default_init, train
from attnsvm.theory.equivalence import solve_svm_equivalence
from attnsvm.theory.experiments._result import ExperimentResult, quantiles
from attnsvm.theory.instances import multi_token_instances
from attnsvm.theory.svm import correlation, solve_frobenius

DIMENSIONS = (4, 6, 8, 10)
THRESHOLD_LOW, THRESHOLD_HIGH = 1e-6, 1e-3  # THRED_L, THRED_H of the notebook
STEPS = 2001
EVERY = 100
#: Init generators are seeded ``INIT_SEED_OFFSET + seed`` (the notebook's init is unseeded).
INIT_SEED_OFFSET = 1_000_000
REFERENCES = ("svmeq", "dir", "one_token")

NOTES = [
    "Candidates are trained in batches (closed-form batched GD) instead of one at a time; the "
    "rejection rules and the seed order are the notebook's, and the first `runs` accepted seeds "
    "are kept, so the accepted set is the one a sequential loop would produce.",
    "The init is nn.Linear's law from a generator seeded 1000000 + seed; the notebook uses the "
    "unseeded global RNG, so acceptance and per-run numbers agree in distribution only.",
    "SVMs are solved exactly (Wolfe min-norm point, with equality constraints for W^mm(O)); an "
    "infeasible SVM is a counted rejection ('svm_fail') instead of a bare except.",
    "As in the notebook, O_i = {t : s_it >= 1e-3} at the last iteration's softmax and W_GD is "
    "the iterate after 2001 steps; 'nothing masked' is decided over the whole batch of "
    "sequences, not per sequence.",
]


def _batch_size(runs_left: int, rate: float | None, largest: int) -> int:
    if rate is None:
        return min(largest, 256)
    return int(min(largest, max(64, math.ceil(1.2 * runs_left / max(rate, 1e-3)))))


def _analyse(inst, s, probs, W_path):
    """SVM-equivalence, W^mm(O) and 1-token SVM of one candidate; None if an SVM fails."""
    X, _, Z, _ = inst.one(s)
    eq = solve_svm_equivalence(X, Z, probs, W_path[-1], threshold=THRESHOLD_HIGH)
    one = solve_frobenius(X, Z, np.argmax(probs, axis=-1))
    if eq.status != "optimal" or not one.feasible:
        return None
    refs = {"svmeq": eq.W_eq, "dir": eq.W_dir, "one_token": one.W}
    masked = probs * ~eq.O
    return {
        "seed": int(inst.seeds[s]),
        "one_minus_corr": {k: 1.0 - correlation(W_path, ref[None]) for k, ref in refs.items()},
        "max_masked_prob": float(masked.max()),
        "selected": int(eq.O.sum()),
        "multi": bool((eq.O.sum(-1) > 1).any()),
    }


def _one_dimension(d, runs, n, T, steps, batch, max_candidates, progress):
    accepted, rejected = [], {"all_positive": 0, "mid": 0, "nothing_masked": 0, "svm_fail": 0}
    next_seed, tried, rate = 1, 0, None
    checkpoints = range(1, steps + 1, EVERY)  # the notebook stores W after steps it+1, it%100==0
    while len(accepted) < runs and next_seed <= max_candidates:
        size = min(_batch_size(runs - len(accepted), rate, batch), max_candidates - next_seed + 1)
        inst = multi_token_instances(range(next_seed, next_seed + size), n, T, d)
        next_seed += size
        has_negative = (inst.Y < 0).any(-1)
        sub = inst.select(has_negative)
        traj = None
        if len(sub.seeds):
            init = default_init(sub.seeds + INIT_SEED_OFFSET, d, "W")
            traj = train(
                AttentionProblem.from_instances(sub),
                init,
                steps=steps,
                checkpoints=checkpoints,
                progress=progress,
            )
        trained = 0
        for seed in inst.seeds:  # in seed order, stopping where a sequential loop would
            if len(accepted) == runs:
                break
            tried += 1
            if not has_negative[seed - inst.seeds[0]]:
                rejected["all_positive"] += 1
                continue
            probs = traj.final_probs[trained]
            W_path = traj.W[trained]
            trained += 1
            if ((probs > THRESHOLD_LOW) & (probs <= THRESHOLD_HIGH)).any():
                rejected["mid"] += 1
            elif not (probs <= THRESHOLD_LOW).any():
                rejected["nothing_masked"] += 1
            else:
                run = _analyse(sub, trained - 1, probs, W_path)
                if run is None:
                    rejected["svm_fail"] += 1
                else:
                    accepted.append(run)
        rate = len(accepted) / tried
    return accepted, rejected, tried, np.asarray(checkpoints)


def _summary(accepted, rejected, tried):
    if not accepted:
        return {"accepted": 0, "tried": tried, "rejected": rejected}
    final = {k: np.array([r["one_minus_corr"][k][-1] for r in accepted]) for k in REFERENCES}
    masked = np.array([r["max_masked_prob"] for r in accepted])
    clean = masked <= 1e-14
    return {
        "accepted": len(accepted),
        "tried": tried,
        "rejected": rejected,
        "acceptance_rate": len(accepted) / tried,
        "final_one_minus_corr": {k: quantiles(v) for k, v in final.items()},
        "frac_max_masked_le_1e-14": float(clean.mean()),
        "median_svmeq_on_clean": float(np.median(final["svmeq"][clean])) if clean.any() else None,
        "mean_selected_tokens": float(np.mean([r["selected"] for r in accepted])),
        "frac_multi_token": float(np.mean([r["multi"] for r in accepted])),
        "mean_curve": {
            k: np.mean([r["one_minus_corr"][k] for r in accepted], 0) for k in REFERENCES
        },
        "seeds": [r["seed"] for r in accepted],
    }


def run(
    seeds: int = 500,
    *,
    dims=DIMENSIONS,
    n: int = 3,
    T: int = 4,
    steps: int = STEPS,
    batch: int = 4096,
    max_candidates: int = 200_000,
    progress: bool = False,
) -> ExperimentResult:
    """``seeds`` = accepted runs per d (the notebook's RUN = 500)."""
    start = time.perf_counter()
    by_d, scatter = {}, {}
    for d in dims:
        accepted, rejected, tried, its = _one_dimension(
            int(d), seeds, n, T, steps, batch, max_candidates, progress
        )
        by_d[int(d)] = _summary(accepted, rejected, tried)
        scatter[int(d)] = accepted
    checks = {}
    for d, m in by_d.items():
        if m["accepted"] < 20:  # theory.md §3.4: at least 20 accepted runs per d
            continue
        f = m["final_one_minus_corr"]
        if d == 10:
            checks["d=10: mean 1-corr(SVMeq) <= 0.01"] = f["svmeq"]["mean"] <= 0.01
            checks["d=10: median 1-corr(SVMeq) <= 5e-3"] = f["svmeq"]["median"] <= 5e-3
            checks["d=10: mean 1-corr(1token) >= 0.05"] = f["one_token"]["mean"] >= 0.05
            checks["d=10: mean SVMeq <= W^mm(O) < 1token"] = (
                f["svmeq"]["mean"] <= f["dir"]["mean"] < f["one_token"]["mean"]
            )
        if d == 4:
            checks["d=4: median 1-corr(SVMeq) <= 0.03"] = f["svmeq"]["median"] <= 0.03
            checks["d=4: mean 1-corr(SVMeq) <= 0.08"] = f["svmeq"]["mean"] <= 0.08
            checks["d=4: median SVMeq < W^mm(O) < 1token"] = (
                f["svmeq"]["median"] < f["dir"]["median"] < f["one_token"]["median"]
            )
        if m["median_svmeq_on_clean"] is not None and d in (4, 10):
            checks[f"d={d}: median 1-corr(SVMeq) <= 5e-3 where masked prob <= 1e-14"] = (
                m["median_svmeq_on_clean"] <= 5e-3
            )
    config = {
        "runs_per_d": seeds,
        "dims": list(dims),
        "n": n,
        "T": T,
        "steps": steps,
        "thresholds": [THRESHOLD_LOW, THRESHOLD_HIGH],
        "checkpoints_every": EVERY,
    }
    metrics = {"iterations": its - 1, "by_d": by_d}
    return ExperimentResult(
        "multi-token",
        config,
        metrics,
        checks,
        NOTES,
        time.perf_counter() - start,
        {"multi_token.png": _plotter(by_d, scatter, its - 1)},
    )


def _plotter(by_d, scatter, its):
    def plot(fig):
        dims = [d for d in by_d if by_d[d]["accepted"]]
        if not dims:
            return
        fig.set_size_inches(3.2 * len(dims) + 1, 6.5)
        axes = fig.subplots(2, len(dims), squeeze=False)
        styles = {
            "svmeq": ("-", "SVM-equivalence W^mm(O) + W^fin"),
            "dir": (":", "W^mm(O) direction only"),
            "one_token": ("--", "1-token Att-SVM"),
        }
        for col, d in enumerate(dims):
            top, bottom = axes[0, col], axes[1, col]
            for k, (ls, label) in styles.items():
                top.semilogy(its, by_d[d]["mean_curve"][k], ls=ls, color="k", label=label)
            top.set(title=f"d = {d}: mean over {by_d[d]['accepted']} runs", xlabel="GD iteration")
            masked = [max(r["max_masked_prob"], 5e-18) for r in scatter[d]]
            err = [r["one_minus_corr"]["svmeq"][-1] for r in scatter[d]]
            bottom.loglog(masked, err, "o", ms=4)
            bottom.set(
                title=f"d = {d}: one dot per run ({len(masked)})",
                xlabel="largest attention left on a masked token\n(0 drawn at 5e-18)",
                xlim=(5e-18, 1e-6),
            )
            bottom.title.set_fontsize(9)
        axes[0, 0].set_ylabel("1 - corr(W_GD(k), reference)")
        axes[1, 0].set_ylabel("1 - corr(W_GD(final), SVMeq)")
        axes[0, 0].legend(fontsize=7)

    return plot
