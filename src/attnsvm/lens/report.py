"""The lens report of a run directory: ``lens.json``, PNG plots and one self-contained HTML page.

``write_report(run_dir)`` reads the run (``attnsvm.rec.train.load_run``), takes ``sequences``
test users of its data (a seeded sample), extracts every requested head (``extract``), scores
the history tokens (``scores``), reads them as Att-SVMs (``analysis``) and writes, into
``out_dir`` (default ``RUN_DIR/lens``): ``lens.json`` (every number), ``*.png`` and
``report.html`` (images embedded as base64; nothing is fetched from the network). Every file is
written to a temporary name and renamed.
"""

from __future__ import annotations

import base64
import html
import io
import json
import multiprocessing
import os
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from rich.progress import Progress
from safetensors import safe_open
from threadpoolctl import threadpool_limits

from attnsvm._atomic import write_bytes, write_text
from attnsvm.lens.analysis import SOFT_MARGIN_C, HeadAnalysis, analyse_head
from attnsvm.lens.extract import (
    LensError,
    extract,
    float64_copy,
    head_factors,
    head_grid,
)
from attnsvm.lens.scores import counterfactual_scores, linear_scores
from attnsvm.rec.data.errors import DataFormatError

EXAMPLE_USERS = 4
SHOWN_HISTORY = 25  # most recent items shown per example user (plus selected/optimal ones)


def read_titles(path: str | Path) -> dict[str, str]:
    """``item id → title`` from ``movies.dat`` (``id::title::genres``) or ``id<TAB>title``."""
    path = Path(path)
    titles = {}
    with path.open(encoding="latin-1") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("::") if "::" in line else line.split("\t")
            if len(parts) < 2 or not parts[0].strip():
                raise DataFormatError(
                    path, "expected 'id::title::genres' or 'id<TAB>title'", number
                )
            titles[parts[0].strip()] = parts[1].strip()
    return titles


def find_titles(config) -> Path | None:
    """``movies.dat`` beside the run's raw data (``data.root``) or its prepared cache, if any."""
    from attnsvm.rec.data.datasets import DATASETS, prepared_path

    name = config.data.dataset
    candidates = []
    if name in DATASETS:
        if config.data.root is not None:
            root = Path(config.data.root)
            candidates += [root / f / "movies.dat" for f in DATASETS[name].folders]
            candidates.append(root / "movies.dat")
        candidates.append(prepared_path(name).parent / "movies.dat")
    else:
        candidates.append(Path(name).parent / "movies.dat")
    return next((c for c in candidates if c.is_file()), None)


def _snapshots(run_dir: Path, layer: int, head: int) -> list[tuple[int, np.ndarray]]:
    """``(epoch, W_selection)`` of one head from ``attention/epoch_*.safetensors``."""
    rows = []
    for path in sorted((run_dir / "attention").glob("epoch_*.safetensors")):
        with safe_open(path, framework="pt") as file:
            keys = set(file.keys())
            meta = file.metadata() or {}

            def get(name, keys=keys, file=file):
                return file.get_tensor(name) if name in keys else None

            prefix = f"layer{layer}."
            if prefix + "q_weight" not in keys:
                continue
            heads = json.loads(meta.get("num_heads", "[1]"))[layer]
            K, Q = head_factors(
                get(prefix + "q_weight"),
                get(prefix + "q_bias"),
                get(prefix + "k_weight"),
                get(prefix + "k_bias"),
                head,
                heads,
            )
        W = K @ Q.T / np.sqrt(K.shape[1])
        W[-1] = 0.0
        rows.append((int(re.findall(r"\d+", path.stem)[0]), W))
    return rows


def _checkpoint_epoch(run_dir: Path) -> int | None:
    """The epoch whose weights ``model.safetensors`` holds (``metrics.json``), if recorded.

    The Att-SVMs are posed on that model's hidden states, so only the ``W`` of epochs up to it
    are compared with them: later snapshots belong to a model the report does not read.
    """
    metrics = run_dir / "metrics.json"
    return json.loads(metrics.read_text()).get("best_epoch") if metrics.is_file() else None


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _plots(a: HeadAnalysis, view, scores: dict[str, np.ndarray]) -> dict[str, bytes]:
    tag = f"L{a.layer}H{a.head}"
    out = {}
    fig, axes = plt.subplots(1, len(scores), figsize=(4.5 * len(scores), 3.6), squeeze=False)
    for ax, (name, s) in zip(axes[0], scores.items(), strict=True):
        gap = s - np.nanmax(s, axis=1, keepdims=True)
        ax.scatter(gap[view.valid], view.attention[view.valid], s=4, alpha=0.4)
        ax.set_xlabel(f"{name} score − best score of the sequence")
        ax.set_ylabel("attention weight (last position)")
        ax.set_title(f"{tag}: attention vs {name} score")
    out[f"{tag}_attention_vs_score.png"] = _png(fig)
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
    ax.set_xlabel("index")
    ax.set_ylabel("σ_k / σ_1")
    ax.set_title(f"{tag}: singular spectra")
    ax.legend(fontsize=8)
    out[f"{tag}_spectra.png"] = _png(fig)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    fro = a.solutions["selected"]["frobenius"]
    scale = fro.objective / np.linalg.norm(a.model_W) if fro else 1.0
    ax.hist(a.model_margins * scale, bins=60)
    ax.axvline(1.0, color="k", linestyle="--", label="Att-SVM margin 1")
    ax.set_xlabel("(x_sel − x_t)ᵀ W z_i, W scaled to ‖W^mm_F‖_F" if fro else "(x_sel − x_t)ᵀ W z_i")
    ax.set_ylabel("constraints")
    ax.set_title(f"{tag}: margins of the model's W")
    ax.legend(fontsize=8)
    out[f"{tag}_margins.png"] = _png(fig)
    if a.epochs:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        epochs = [row["epoch"] for row in a.epochs]
        for norm in ("frobenius", "nuclear"):
            if norm in a.epochs[0]:
                ax.plot(
                    epochs, [row[norm] for row in a.epochs], "o-", label=f"corr(W, W^mm {norm})"
                )
        ax.set_xlabel("epoch")
        ax.set_ylabel("correlation")
        ax.set_title(f"{tag}: correlation to the final Att-SVM over training")
        ax.legend(fontsize=8)
        out[f"{tag}_correlation_over_epochs.png"] = _png(fig)
    return out


def _example_html(run, rows, windows, targets, analyses, titles, views, extras, k=10) -> str:
    a, view = analyses[0], views[0]
    with torch.inference_mode():
        # score_last appends any mask token itself
        scores = run.model.score_last(torch.from_numpy(windows), **extras)
    parts = []

    def name(internal: int) -> str:
        external = str(run.item_ids[internal])
        return html.escape(titles.get(external, f"item {external}"))

    for i in range(min(EXAMPLE_USERS, len(rows))):
        seen = windows[i][windows[i] > 0]
        s = scores[i].clone()
        s[torch.from_numpy(seen)] = -torch.inf
        top = torch.sort(s, descending=True, stable=True).indices[:k].numpy()
        positions = np.flatnonzero(view.valid[i])
        marks = {int(a.selected[i]): "selected"}
        for score_name, opt in a.optimal.items():
            marks[int(opt[i])] = marks.get(int(opt[i]), "") + f" optimal ({score_name})"
        shown = [p for p in positions if p >= positions[-1] - SHOWN_HISTORY + 1 or p in marks]
        top_weight = max(float(view.attention[i].max()), 1e-12)
        lines = []
        for p in shown:
            weight = float(view.attention[i, p])
            mark = marks.get(int(p), "")
            lines.append(
                f"<tr class='{'mark' if mark else ''}'><td>{p}</td><td>{name(windows[i, p])}</td>"
                f"<td><div class='bar' style='width:{100 * weight / top_weight:.1f}%'></div>"
                f"{weight:.3f}</td><td>{html.escape(mark.strip())}</td></tr>"
            )
        recs = "".join(f"<li>{name(item)}</li>" for item in top)
        user = html.escape(str(run.user_ids[rows[i]]))
        parts.append(
            f"<div class='user'><h3>user {user} (layer {a.layer}, head {a.head}; true next: "
            f"{name(targets[i])}; {len(positions)} items, {len(positions) - len(shown)} older "
            f"ones not shown)</h3><table><tr><th>pos</th><th>item</th><th>attention</th>"
            f"<th></th></tr>{''.join(lines)}</table><p>top-{k} recommendations:</p>"
            f"<ol>{recs}</ol></div>"
        )
    return "".join(parts)


STYLE = """body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}
td,th{padding:2px 8px;border-bottom:1px solid #ddd;font-size:13px;vertical-align:middle}
.bar{display:inline-block;height:10px;background:#3b7dd8;margin-right:6px;vertical-align:middle}
tr.mark{background:#fff4cc}.user{margin-bottom:2em}img{max-width:100%}pre{font-size:12px}"""


def _html(summary: dict, images: dict[str, bytes], examples: str) -> str:
    rows = []
    for head in summary["heads"]:
        tag = f"L{head['layer']}H{head['head']}"
        svm = head["svm"]["selected"]
        cells = [f"{tag}", f"{head['attention_on_selected'].get('median', float('nan')):.3f}"]
        for name, info in head["scores"].items():
            cells.append(
                f"{name}: {info['selected_is_optimal']:.1%} "
                f"(g/l/n {info['classes']['global']}/{info['classes']['local']}/"
                f"{info['classes']['neither']})"
            )
        for norm in ("frobenius", "nuclear"):
            s = svm.get(norm)
            cells.append(
                "—" if s is None else f"{s['correlation']:.3f} ({s['kind']}, rank {s['rank']})"
            )
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    figures = "".join(
        f"<figure><img alt='{html.escape(n)}' src='data:image/png;base64,"
        f"{base64.b64encode(b).decode()}'><figcaption>{html.escape(n)}</figcaption></figure>"
        for n, b in images.items()
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in summary["notes"])
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>attnsvm lens</title>"
        f"<style>{STYLE}</style></head><body><h1>The lens: {html.escape(summary['run'])}</h1>"
        f"<p>{summary['sequences']} test sequences, model {html.escape(summary['model'])}. "
        "Per head: median attention on the selected token; how often the selected token is "
        "optimal (global / only local / neither); correlation of the head's W with the Att-SVM "
        "of its selected tokens.</p><table><tr><th>head</th><th>attention</th>"
        + "".join(f"<th>{html.escape(n)} score</th>" for n in summary["score_kinds"])
        + "<th>corr W^mm_F</th><th>corr W^mm_*</th></tr>"
        + "".join(rows)
        + "</table>"
        f"<ul>{notes}</ul><h2>Plots</h2>{figures}<h2>Example users</h2>{examples}"
        "</body></html>"
    )


def _write_bytes(path: Path, data: bytes) -> None:

    write_bytes(path, data)


def _analyse_job(job, C: float) -> HeadAnalysis:
    view, scores, snapshots = job
    with threadpool_limits(limits=1, user_api="blas"):
        return analyse_head(view, scores, C=C, snapshots=snapshots)


def _analyse_heads(jobs: list, C: float, done: Callable[[], None]) -> list[HeadAnalysis]:
    """``analyse_head`` of every ``(view, scores, snapshots)``, in job order. Heads are
    independent and their Att-SVM solves single-threaded, so with several cores they run in as
    many processes (spawned, so that no forked torch or OpenMP state is inherited)."""
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers <= 1:
        analyses = []
        for job in jobs:
            analyses.append(_analyse_job(job, C))
            done()
        return analyses
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(_analyse_job, job, C) for job in jobs]
        analyses = []
        for future in futures:
            analyses.append(future.result())
            done()
    return analyses


def write_report(
    run_dir,
    out_dir=None,
    sequences: int = 200,
    layer: int | None = None,
    head: int | None = None,
    *,
    titles: str | Path | None = None,
    C: float = SOFT_MARGIN_C,
    seed: int = 0,
    progress: bool = True,
) -> Path:
    """Write the lens report of ``run_dir`` and return the path of ``report.html``.

    BLAS runs on one thread meanwhile: the Att-SVM solves factorise many small matrices, where
    more BLAS threads only add start-up and contention (a 128×128 Cholesky took 12 ms with
    OpenBLAS's threads on a busy 2-core machine, 0.5 ms without).
    """
    with threadpool_limits(limits=1, user_api="blas"):
        return _write_report(
            run_dir,
            out_dir,
            sequences,
            layer,
            head,
            titles=titles,
            C=C,
            seed=seed,
            progress=progress,
        )


def _write_report(
    run_dir,
    out_dir,
    sequences: int,
    layer: int | None,
    head: int | None,
    *,
    titles: str | Path | None,
    C: float,
    seed: int,
    progress: bool,
) -> Path:
    from attnsvm.rec.data.datasets import load_dataset
    from attnsvm.rec.data.splits import leave_one_out
    from attnsvm.rec.train import load_run
    from attnsvm.rec.train.trainer import model_inputs

    run = load_run(run_dir)
    if run.baseline:
        raise LensError(
            f"{run.run_dir}: {run.config.model.name} is a non-neural baseline; "
            "it has no attention to read"
        )
    out = Path(out_dir) if out_dir is not None else run.run_dir / "lens"
    if sequences < 1:
        raise LensError(f"sequences must be ≥ 1, got {sequences}")
    split = leave_one_out(load_dataset(run.config.data.dataset, root=run.config.data.root))
    test = split.test
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(test.users), size=min(sequences, len(test.users)), replace=False))
    windows = test.history.padded(run.max_len, rows)
    targets = np.array([test.targets.row(r)[0] for r in rows])
    item_seq = run.model.scoring_input(torch.from_numpy(windows))
    model64 = float64_copy(run.model)
    grid = head_grid(model64, layer, head)
    # a personalised model (SSE-PT) is read with each sampled user's own embedding, a
    # time-aware one (STRec) with the histories' event times
    times = None
    if test.history.times is not None:
        times = torch.from_numpy(test.history.padded_times(run.max_len, rows))
    extras = model_inputs(run.model, torch.from_numpy(test.users[rows]), times)
    views = extract(model64, item_seq, grid, extras)
    checkpoint_epoch = _checkpoint_epoch(run.run_dir)
    notes = [
        f"token scores use the true next item (the leave-one-out test target); soft-margin "
        f"C = {C} where a hard-margin Att-SVM is infeasible"
    ]
    jobs = []
    for view in views:
        scores = {}
        # the linear head's direct path is derived for TransformerEncoder blocks only; the
        # counterfactual re-runs any model
        for kind, score in (("linear", linear_scores), ("counterfactual", counterfactual_scores)):
            try:
                scores[kind] = score(model64, item_seq, targets, view.layer, view.head, extras)
            except LensError as error:
                if str(error) not in notes:
                    notes.append(str(error))
        snapshots = [
            (epoch, W)
            for epoch, W in _snapshots(run.run_dir, view.layer, view.head)
            if checkpoint_epoch is None or epoch <= checkpoint_epoch
        ]
        jobs.append((view, scores, snapshots))
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("lens: Att-SVMs per head", total=len(jobs))
        analyses = _analyse_heads(jobs, C, lambda: bar.update(task, advance=1))
    images = {}
    for analysis, (view, scores, _) in zip(analyses, jobs, strict=True):
        images.update(_plots(analysis, view, scores))
    if not (run.run_dir / "attention").is_dir():
        notes.append(
            "no attention/ snapshots in the run directory (train with the "
            "AttentionSnapshots callback to follow the correlation over epochs)"
        )
    title_path = Path(titles) if titles is not None else find_titles(run.config)
    item_titles = read_titles(title_path) if title_path is not None else {}
    summary = {
        "run": str(run.run_dir),
        "model": run.config.model.name,
        "sequences": len(rows),
        "users": run.user_ids[test.users[rows]].tolist(),
        "score_kinds": list(analyses[0].optimal),
        "soft_margin_C": C,
        "checkpoint_epoch": checkpoint_epoch,
        "titles": str(title_path) if title_path else None,
        "notes": notes,
        "heads": [a.summary for a in analyses],
    }
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "lens.json", json.dumps(summary, indent=1) + "\n")
    for name, data in images.items():
        _write_bytes(out / name, data)
    examples = _example_html(
        run, test.users[rows], windows, targets, analyses, item_titles, views, extras
    )
    write_text(out / "report.html", _html(summary, images, examples))
    return out / "report.html"
