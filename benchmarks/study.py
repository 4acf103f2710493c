"""What the architecture studies share: resumable runs, their per-user results, paired tables.

A study trains named variants × seeds into ``OUT/<dataset>/<variant>-seed<N>`` through the
library's ``train`` (a finished run is skipped, an interrupted one resumed) and reports each
variant as mean ± std over seeds with a paired test against a reference variant. The test pairs
users, not seeds: each user's metric is first averaged over the seeds both variants finished,
then the paired t-test and Wilcoxon test run over users (``attnsvm compare``'s tests).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from attnsvm.rec.config import RunConfig
from attnsvm.rec.eval.ranking import EvalResult
from attnsvm.rec.eval.significance import compare

ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def budget(config: RunConfig, epochs: int, steps: int | None, threads: int | None) -> RunConfig:
    """``config`` with the command line's epoch budget, step cap and thread count."""
    train = replace(config.train, epochs=epochs, steps_per_epoch=steps, num_threads=threads)
    return replace(config, train=train)


def run_path(out: Path, dataset: str, variant: str, seed: int) -> Path:
    return out / dataset / f"{variant}-seed{seed}"


def run(config: RunConfig, path: Path) -> Path:
    """Train ``config`` into ``path``: skipped when finished, resumed when interrupted."""
    from attnsvm.rec.train.checkpoint import RunDirectory
    from attnsvm.rec.train.trainer import train

    if path.is_dir():
        print(f"done already: {path}", flush=True)
        return path
    resume = (RunDirectory(path).partial / "resume.pt").exists()
    start = time.perf_counter()
    result = train(config, path, resume=resume, show_progress=False)
    print(
        f"{path}: HR@10 {result.test['HR@10']:.4f} NDCG@10 {result.test['NDCG@10']:.4f} "
        f"({result.epochs} epochs, best {result.best_epoch}, {result.train_seconds:.0f}s "
        f"training, {time.perf_counter() - start:.0f}s wall)",
        flush=True,
    )
    return path


def finished(out: Path, dataset: str, variant: str) -> dict[int, Path]:
    """The finished runs of ``variant`` on ``dataset``, by seed."""
    paths = (out / dataset).glob(f"{variant}-seed*/metrics.json")
    return {int(p.parent.name.rsplit("-seed", 1)[1]): p.parent for p in paths}


def metrics(path: Path) -> dict:
    """A finished run's ``metrics.json`` (``test``, ``train_seconds``, ``epochs``, …)."""
    return json.loads((path / "metrics.json").read_text())


def per_user(path: Path) -> EvalResult:
    return EvalResult.load(path / "test_eval.json")


def pm(values: list[float] | np.ndarray) -> str:
    values = np.asarray(values, dtype=np.float64)
    if values.size == 1:
        return f"{values[0]:.4f}"
    return f"{values.mean():.4f} ± {values.std(ddof=1):.4f}"


def seed_mean(paths: list[Path], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(users, metric per user averaged over the runs)``; the runs must share their users."""
    results = [per_user(p) for p in paths]
    for result in results[1:]:
        if not np.array_equal(result.users, results[0].users):
            raise ValueError(f"runs {paths} were evaluated on different users")
    return results[0].users, np.mean([r.per_user[metric] for r in results], axis=0)


def paired(runs_a: dict[int, Path], runs_b: dict[int, Path], metric: str) -> str:
    """``mean a − b (p t-test, p Wilcoxon, n seeds)`` over the seeds both have, "—" if none."""
    seeds = sorted(runs_a.keys() & runs_b.keys())
    if not seeds:
        return "—"
    users_a, a = seed_mean([runs_a[s] for s in seeds], metric)
    users_b, b = seed_mean([runs_b[s] for s in seeds], metric)
    if not np.array_equal(users_a, users_b):
        return "— (different users)"
    test = compare({metric: a}, {metric: b}, metric)
    return (
        f"{test['mean_difference']:+.4f} (t p={test['t_pvalue']:.2g}, "
        f"W p={test['wilcoxon_pvalue']:.2g}, {len(seeds)} seeds)"
    )


def table(out: Path, datasets: list[str], variants: list[str], reference: str) -> str:
    """HR@10 and NDCG@10 (mean ± std over seeds), seconds per epoch and the paired NDCG@10
    difference to ``reference`` of every variant with a finished run."""
    lines = [
        "| dataset | variant | seeds | HR@10 | NDCG@10 | s / epoch "
        f"| Δ NDCG@10 vs {reference} (paired over users) |",
        "|---|---|---|---|---|---|---|",
    ]
    for dataset in datasets:
        base = finished(out, dataset, reference)
        for variant in variants:
            runs = finished(out, dataset, variant)
            if not runs:
                continue
            records = [metrics(p) for p in runs.values()]
            hr = [r["test"]["HR@10"] for r in records]
            ndcg = [r["test"]["NDCG@10"] for r in records]
            per_epoch = np.mean([r["train_seconds"] / max(r["epochs"], 1) for r in records])
            versus = "—" if variant == reference else paired(runs, base, "NDCG@10")
            lines.append(
                f"| {dataset} | {variant} | {len(runs)} | {pm(hr)} | {pm(ndcg)} "
                f"| {per_epoch:.1f} | {versus} |"
            )
    return "\n".join(lines)
