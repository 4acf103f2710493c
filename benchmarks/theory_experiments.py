"""Every theory experiment at the notebooks' full size vs the official one-seed-at-a-time loop.

Ours: ``attnsvm.theory.experiments`` at full size (batched closed-form GD, exact/accurate SVMs).
Official: the notebooks' loop (an ``nn.Module`` copied from base.py / base_nonlinear.py, autograd,
``torch.optim.SGD`` with the normalised gradient, W stored every step) plus base.py's
``W_svm_solver`` (:func:`attnsvm.theory._compat.solve_official_style`: one cvxpy constraint per
pair, cvxpy's default solver). The official loop is timed on a sample of seeds / candidates /
instances and extrapolated linearly to the full count (stated in the table); torch runs
single-threaded in both (multi-threading tiny tensors is 10-40x slower on a busy machine, which
would flatter us).

    .venv/bin/python benchmarks/theory_experiments.py --out /tmp/theory_bench [--only NAME,...]
    .venv/bin/python benchmarks/theory_experiments.py --out /tmp/theory_bench --report
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

import conditions
from attnsvm.theory._compat import solve_official_style
from attnsvm.theory.experiments import EXPERIMENTS, run_experiment
from attnsvm.theory.experiments import rank as rank_experiment
from attnsvm.theory.instances import multi_token_instances, paper_instances

torch.set_num_threads(1)
warnings.filterwarnings("ignore")
EPS = torch.finfo(torch.double).eps


class OfficialSelfAttn(nn.Module):
    """base.py's ``SelfAttn`` (linear head) and base_nonlinear.py's ReLU mode, cross-attention."""

    def __init__(self, d, univariate=True, relu=False):
        super().__init__()
        self.univariate, self.relu = univariate, relu
        if univariate:
            self.W = nn.Linear(d, d, bias=False)
        else:
            self.query = nn.Linear(d, d, bias=False)
            self.key = nn.Linear(d, d, bias=False)
        self.v = nn.Parameter(torch.randn(d) * 0.01)
        self.value = nn.Linear(d, d, bias=False) if relu else nn.Identity()

    def forward(self, X, Z):
        n, _, d = X.shape
        z = Z.reshape(n, 1, d)
        if self.univariate:
            out = torch.softmax(z @ self.W(X).transpose(-2, -1), dim=-1)
        else:
            out = torch.softmax(self.query(z) @ self.key(X).transpose(-2, -1), dim=-1)
        self.sfx_out = out
        out = out @ self.value(X)
        return (torch.relu(out) if self.relu else out) @ self.v


def official_train(X, Y, Z, head, univariate, steps, relu=False):
    """One seed of the notebooks' training loop; returns (Ws per step, final softmax)."""
    X, Y, Z, head = (torch.as_tensor(a) for a in (X, Y, Z, head))
    d = X.shape[-1]
    model = OfficialSelfAttn(d, univariate, relu).double()
    if relu:
        model.value.weight.data = head.T
        model.v.data = torch.ones(d).double()
    else:
        model.v.data = head
    params = [model.W.weight] if univariate else [model.query.weight, model.key.weight]
    optimizer = torch.optim.SGD(params, lr=0.1)
    Ws = np.zeros((steps, d, d))
    for it in range(steps):
        optimizer.zero_grad()
        out = model(X, Z).view(-1)
        loss = torch.log(1 + torch.exp(-Y * out)).mean()
        if not univariate:
            loss = loss + EPS * (model.key.weight.norm() ** 2 + model.query.weight.norm() ** 2)
        loss.backward()
        for p in params:
            p.grad /= p.grad.norm() + EPS
        optimizer.step()
        W = (
            model.W.weight.detach().T
            if univariate
            else model.query.weight.T.mm(model.key.weight).T.detach()
        )
        Ws[it] = W.numpy()
    return Ws, model.sfx_out.detach()[:, 0].numpy()


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def official_seed(inst, s, steps, norms_by_param, relu=False):
    """Seconds for one seed: both trainings and their official SVM solves."""
    X, Y, Z, head = inst.one(s)

    def work():
        for univariate, norms in norms_by_param:
            _, probs = official_train(X, Y, Z, head, univariate, steps, relu)
            alpha = probs.argmax(-1)
            for fro in norms:
                solve_official_style(X, Z, alpha, fro=fro)

    return _timed(work)


def official_global_path(sample):
    from attnsvm.theory.instances import visualization1, visualization2

    total = sum(
        official_seed(make(), 0, 2000, [(True, (True, False)), (False, ())])
        for make in (visualization1, visualization2)
    )
    return total, "both instances, run in full"


def official_local_convergence(sample):
    inst = paper_instances(range(sample), 6, 8, 10)
    per = [
        official_seed(inst, s, 2000, [(True, (True, False)), (False, (True, False))])
        for s in range(sample)
    ]
    return statistics.mean(per) * 100, f"{sample} of 100 seeds, x100/{sample}"


def official_overparameterization(sample):
    total = 0.0
    for d in (2, 4, 7, 10, 15, 20):
        inst = paper_instances(range(sample), 6, 8, d)
        per = [
            official_seed(inst, s, 2000, [(True, (True,)), (False, (True, False))])
            for s in range(sample)
        ]
        total += statistics.mean(per) * 30
    return total, f"{sample} of 30 seeds per d, x30/{sample}"


def official_rank(sample):
    total = 0.0
    for n, T in rank_experiment.CELLS:
        for d in rank_experiment.DIMENSIONS:
            inst = paper_instances(range(sample), n, T, d)
            opt = inst.optimal()
            per = [
                _timed(
                    lambda s=s, inst=inst, opt=opt: [
                        solve_official_style(inst.X[s], inst.Z[s], opt[s], fro=f)
                        for f in (True, False)
                    ]
                )
                for s in range(sample)
            ]
            total += statistics.mean(per) * 100
    return total, f"{sample} of 100 instances per cell (40 cells), x100/{sample}"


def official_multi_token(sample, ours_json):
    """Per-candidate GD time on a sample, times the candidates our run had to train."""
    total = 0.0
    for d, m in ours_json["metrics"]["by_d"].items():
        inst = multi_token_instances(range(1, 1 + 4 * sample), 3, 4, int(d))
        trained = [s for s in range(len(inst.seeds)) if (inst.Y[s] < 0).any()][:sample]
        per = [
            _timed(lambda s=s, inst=inst: official_train(*inst.one(s), True, 2001, relu=True))
            for s in trained
        ]
        X, _, Z, _ = inst.one(trained[0])
        solve = _timed(lambda X=X, Z=Z: solve_official_style(X, Z, np.zeros(3, int), fro=True))
        candidates = m["tried"] - m["rejected"]["all_positive"]
        total += statistics.mean(per) * candidates + 3 * solve * m["accepted"]
    return total, (
        f"{sample} candidates per d timed, x (candidates trained by our run); "
        "+3 SVM solves per accepted run"
    )


OFFICIAL = {
    "global-path": official_global_path,
    "local-convergence": official_local_convergence,
    "rank": official_rank,
    "overparameterization": official_overparameterization,
}


def bench(name, out: Path, sample: int):
    start, start_cpu = time.perf_counter(), time.process_time()
    result = run_experiment(name)
    ours = time.perf_counter() - start
    result.save(out / name)
    record = {
        "experiment": name,
        "ours_s": ours,
        # CPU seconds of this single-threaded process: its wall time on an idle core, which a
        # machine shared with other jobs cannot show
        "ours_cpu_s": time.process_time() - start_cpu,
        "checks": result.checks,
        "passed": f"{sum(result.checks.values())}/{len(result.checks)}",
    }
    if name == "multi-token":
        record["official_s"], record["official_how"] = official_multi_token(
            sample, result.to_json()
        )
    elif name in OFFICIAL:
        record["official_s"], record["official_how"] = OFFICIAL[name](sample)
    else:
        record["official_s"], record["official_how"] = None, "no official code"
    (out / f"bench_{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))


def report(out: Path):
    rows = [
        json.loads((out / f"bench_{n}.json").read_text())
        for n in EXPERIMENTS
        if (out / f"bench_{n}.json").exists()
    ]
    print(
        "| experiment | ours (s) | ours CPU (s) | official (s) | ratio | official timed as "
        "| checks |"
    )
    print("|---|---|---|---|---|---|---|")
    ours_total = official_total = 0.0
    for r in rows:
        off = r["official_s"]
        cpu = f"{r['ours_cpu_s']:.1f}" if "ours_cpu_s" in r else "-"
        ratio = "-" if not off else f"{off / r['ours_s']:.{1 if off < 10 * r['ours_s'] else 0}f}x"
        if off:
            ours_total += r["ours_s"]
            official_total += off
        official = f"{off:.0f}" if off else "-"
        print(
            f"| {r['experiment']} | {r['ours_s']:.1f} | {cpu} | {official} | {ratio} | "
            f"{r['official_how']} | {r['passed']} |"
        )
    if official_total:
        print(
            f"| **suite (with an official counterpart)** | {ours_total:.0f} | | "
            f"{official_total:.0f} | {official_total / ours_total:.0f}x | | |"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default=",".join(EXPERIMENTS))
    parser.add_argument("--sample", type=int, default=3, help="official seeds timed per item")
    parser.add_argument("--report", action="store_true", help="print the table of saved runs")
    args = parser.parse_args()
    conditions.report()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report:
        report(args.out)
        return
    for name in args.only.split(","):
        bench(name, args.out, args.sample)


if __name__ == "__main__":
    main()
