"""The lens report of a run directory: ``lens.json``, PNG plots and one self-contained HTML page.

``write_report(run_dir)`` reads the run (``attnsvm.lens.run.analyse_run``: ``sequences`` test
users, every requested head extracted, its tokens scored and read as Att-SVMs), then writes into
``out_dir`` (default ``RUN_DIR/lens``): ``lens.json`` (every number), ``*.png``
(``attnsvm.lens.plots``) and ``report.html`` (``attnsvm.lens.page``; images embedded as base64,
nothing fetched from the network), all through ``attnsvm._atomic.atomic_files``: every file is
renamed into place once all are written, so a failure (a full disk) leaves none of them.
Items are shown by title where a titles file is given or found beside the data
(``attnsvm.rec.data.titles``).
"""

from __future__ import annotations

import json
from pathlib import Path

from attnsvm._atomic import atomic_files, check_output
from attnsvm.lens.page import examples_html, report_html
from attnsvm.lens.plots import head_plots
from attnsvm.lens.run import analyse_run
from attnsvm.lens.solve import SOFT_MARGIN_C
from attnsvm.lens.verdict import category_codes, head_verdict
from attnsvm.rec.data.titles import find_titles, read_item_titles


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
    """Write the lens report of ``run_dir`` and return the path of ``report.html``."""
    if out_dir is not None:  # before the analysis: a folder that cannot be written fails at once
        check_output(out_dir, folder=True)
    result = analyse_run(run_dir, sequences, layer, head, C=C, seed=seed, progress=progress)
    data = result.run.config.data
    title_path = Path(titles) if titles is not None else find_titles(data.dataset, data.root)
    items = read_item_titles(title_path) if title_path is not None else None
    item_titles = items.titles if items is not None else {}
    images = {}
    for analysis, view, scores in zip(result.analyses, result.views, result.scores, strict=True):
        images.update(head_plots(analysis, view, scores))
    summary = result.summary(title_path)
    summary["verdict"] = [v.summary() for v in verdicts(result, items.categories if items else {})]
    info = run_info(result)
    out = Path(out_dir) if out_dir is not None else result.run.run_dir / "lens"
    page = report_html(summary, images, examples_html(result, item_titles), info)
    with atomic_files(out) as temporary:
        temporary("lens.json").write_text(json.dumps(summary, indent=1) + "\n")
        for name, png in images.items():
            temporary(name).write_bytes(png)
        temporary("report.html").write_text(page)
    return out / "report.html"


def run_info(result) -> dict:
    """What the page's header says of the run: its ``metrics.json`` where it can be read."""
    run = result.run
    info = {"run": str(run.run_dir), "model": run.config.model.name}
    info["dataset"] = Path(run.config.data.dataset).name
    try:
        metrics = json.loads((run.run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return info
    if isinstance(metrics, dict):
        for key in ("test", "epochs", "best_epoch", "protocol"):
            if key in metrics:
                info[key] = metrics[key]
    return info


def verdicts(result, categories: dict[str, str]) -> list:
    """Per head, the plain verdict (``attnsvm.lens.verdict``): ``categories`` maps external item
    ids to their category (the first one listed where several are, as ``A | B``)."""
    first = {item: c.split("|")[0].strip() for item, c in categories.items() if c.strip()}
    codes = category_codes(result.run.item_ids, first)
    out = []
    for analysis, view in zip(result.analyses, result.views, strict=True):
        best = analysis.optimal.get("counterfactual", analysis.optimal.get("linear"))
        out.append(
            head_verdict(
                analysis.layer,
                analysis.head,
                view.attention,
                view.valid,
                result.windows,
                result.targets,
                codes,
                best,
            )
        )
    return out
