"""The report's one self-contained HTML page: a table per head, the plots inline, example users.

Images are embedded as base64 ``data:`` URLs and the style sheet is inline: the page fetches
nothing from the network and can be mailed or archived as one file.
"""

from __future__ import annotations

import base64
import html

import numpy as np

from attnsvm.lens.run import LensResult

SHOWN_HISTORY = 25  # most recent items shown per example user (plus selected/optimal ones)

STYLE = """body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}
td,th{padding:2px 8px;border-bottom:1px solid #ddd;font-size:13px;vertical-align:middle}
.bar{display:inline-block;height:10px;background:#3b7dd8;margin-right:6px;vertical-align:middle}
tr.mark{background:#fff4cc}.user{margin-bottom:2em}img{max-width:100%}pre{font-size:12px}
table.header th{text-align:left}dt{font-weight:bold;margin-top:.4em}dd{margin-left:1.5em}
figcaption{font-size:13px;color:#333;margin-bottom:1.5em}.planted{background:#e8f4e8;padding:8px}"""


def examples_html(result: LensResult, titles: dict[str, str]) -> str:
    """The first head's attention over each example user's recent history, the selected and
    optimal tokens marked, and the model's top recommendations; items by title where known."""
    a, view, run = result.analyses[0], result.views[0], result.run
    windows, k = result.windows, result.recommendations.shape[1]
    parts = []

    def name(internal: int) -> str:
        external = str(run.item_ids[internal])
        return html.escape(titles.get(external, f"item {external}"))

    for i, top in enumerate(result.recommendations):
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
        user = html.escape(str(run.user_ids[result.users[i]]))
        parts.append(
            f"<div class='user'><h3>user {user} (layer {a.layer}, head {a.head}; true next: "
            f"{name(result.targets[i])}; {len(positions)} items, {len(positions) - len(shown)} "
            f"older ones not shown)</h3><table><tr><th>pos</th><th>item</th><th>attention</th>"
            f"<th></th></tr>{''.join(lines)}</table><p>top-{k} recommendations:</p>"
            f"<ol>{recs}</ol></div>"
        )
    return "".join(parts)


PAPER = "https://arxiv.org/abs/2308.16898"

#: What each term of the page means, in plain words, with the paper's section.
GLOSSARY = (
    (
        "selected token",
        "the history item the head's last query attends to most (argmax of its "
        "attention weights): the token the attention 'chooses'.",
    ),
    (
        "token score",
        "how much attending to that one history item would raise the logit of the "
        "item the user really chose next. Linear: the head's direct path, computed in closed form "
        "(the paper's γ = Yᵢ·vᵀxᵢₜ, §2.1). Counterfactual: the model run again with all of this "
        "head's attention forced onto that item.",
    ),
    (
        "optimal token",
        "the item with the highest score. The paper (Theorem 2, §2.3) shows that "
        "gradient descent on attention converges towards selecting it.",
    ),
    (
        "global / local / neither",
        "the selected token is the optimal one (global); it scores "
        "higher than its SVM-neighbours, the tokens whose max-margin constraints are active "
        "(local: a locally optimal token, Definition 2, §2.5, where gradient descent can also "
        "settle); or neither.",
    ),
    (
        "W",
        "the head's key-query matrix W = W_K W_Qᵀ / √d_head: the attention logit of item x for "
        "query z is xᵀ W z.",
    ),
    (
        "W^mm_F, W^mm_*",
        "the Att-SVM solutions (§2.2, §3): the smallest W in Frobenius norm (F) or "
        "nuclear norm (*) that makes every sequence's selected token beat each other token by "
        "a margin of 1. The paper proves that the learned W's direction converges to W^mm_F "
        "when W is trained directly, and to W^mm_* when it is trained as the product W_K W_Qᵀ.",
    ),
    (
        "corr",
        "the correlation (cosine) between the head's W and W^mm: 1 means the head attends "
        "like the max-margin separator of its own choices.",
    ),
    (
        "rank",
        "the rank of W^mm: the nuclear-norm solution is low-rank, as the paper predicts for "
        "the (K, Q) parameterisation.",
    ),
    (
        "margins",
        "per (sequence, other token) pair, (x_selected − x_other)ᵀ W z: how clearly the "
        "head prefers its choice; the Att-SVM makes the smallest of them 1.",
    ),
)

#: A caption per figure kind (the name's suffix after the head tag).
CAPTIONS = {
    "attention_vs_score.png": "Each dot is one history item of one sampled sequence: its "
    "attention weight against its token score. Attention that follows the score puts the "
    "high-scoring items high.",
    "spectra.png": "Singular values of the head's W beside those of W^mm_F and W^mm_*: how many "
    "directions the head uses, against the max-margin solutions.",
    "margins.png": "The distribution of the head's margins (x_selected − x_other)ᵀ W z over all "
    "pairs, scaled as the Att-SVM scales them; positive means the choice wins.",
    "correlation_over_epochs.png": "corr(W, W^mm) of the head's W at each training epoch (from "
    "the AttentionSnapshots callback): the paper's convergence in direction, seen in training.",
}


def _caption(name: str) -> str:
    tag, _, kind = name.partition("_")
    return f"{tag}: {CAPTIONS.get(kind, kind)}"


def _header(info: dict) -> str:
    """Which run the page describes: directory, model, data, training, test metrics."""
    metrics = info.get("test", {})
    shown = ", ".join(
        f"{name} {metrics[name]:.4f}" for name in ("HR@10", "NDCG@10", "MRR@10") if name in metrics
    )
    rows = [
        ("run", info["run"]),
        ("model", info["model"]),
        ("data", f"{info['dataset']} ({info.get('protocol', 'split unknown')})"),
        (
            "training",
            f"{info.get('epochs', '?')} epochs, weights of epoch {info.get('best_epoch', '?')}",
        ),
        ("test", shown or "no metrics.json"),
    ]
    cells = "".join(f"<tr><th>{k}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f"<table class='header'>{cells}</table>"


def _recovery(summary: dict) -> str:
    recovery = summary.get("planted_trigger_recovery")
    if not recovery:
        return ""
    parts = ", ".join(f"{head} {share:.0%}" for head, share in recovery.items())
    return (
        "<p class='planted'><b>Planted trigger:</b> this is the built-in planted data, where the "
        "next item is decided by one earlier trigger item. The attention selects the trigger in "
        f"{parts} of the sampled test sequences (a random choice would hit it about once per "
        "history length).</p>"
    )


def _glossary() -> str:
    items = "".join(f"<dt>{html.escape(t)}</dt><dd>{html.escape(d)}</dd>" for t, d in GLOSSARY)
    return (
        "<details open><summary>How to read this report</summary><p>The paper "
        f"<a href='{PAPER}'>Transformers as Support Vector Machines</a> (Tarzanagh, Li, "
        "Thrampoulidis, Oymak 2023) shows that a trained attention layer behaves like a "
        "hard-margin SVM that separates the token it selects from the others. This page reads "
        f"the run's attention heads that way.</p><dl>{items}</dl></details>"
    )


def _head_rows(summary: dict) -> str:
    rows = []
    for head in summary["heads"]:
        tag = f"L{head['layer']}H{head['head']}"
        svm = head["svm"]["selected"]
        cells = [f"{tag}", f"{head['attention_on_selected'].get('median', float('nan')):.3f}"]
        for info in head["scores"].values():
            cells.append(
                f"{info['selected_is_optimal']:.1%} "
                f"({info['classes']['global']} / {info['classes']['local']} / "
                f"{info['classes']['neither']})"
            )
        for norm in ("frobenius", "nuclear"):
            s = svm.get(norm)
            cells.append(
                "—" if s is None else f"{s['correlation']:.3f} ({s['kind']}, rank {s['rank']})"
            )
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return "".join(rows)


def report_html(summary: dict, images: dict[str, bytes], examples: str, info: dict) -> str:
    """The page: ``summary`` (``LensResult.summary``), ``images`` (name → PNG), ``examples``,
    ``info`` (the run: model, dataset, epochs, test metrics)."""
    figures = "".join(
        f"<figure><img alt='{html.escape(n)}' src='data:image/png;base64,"
        f"{base64.b64encode(b).decode()}'><figcaption>{html.escape(_caption(n))}</figcaption>"
        "</figure>"
        for n, b in images.items()
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in summary["notes"])
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>attnsvm lens</title>"
        f"<style>{STYLE}</style></head><body><h1>The lens: {html.escape(info['model'])} on "
        f"{html.escape(info['dataset'])}</h1>"
        + _verdict(summary)
        + _header(info)
        + _recovery(summary)
        + _glossary()
        + f"<h2>Heads</h2><p>{summary['sequences']} sampled test sequences. Per head: the median "
        "attention weight on the selected token; for each token score, how often the selected "
        "token is the optimal one, and the counts of selected tokens that are globally optimal "
        "/ only locally optimal / neither; the correlation of the head's W with the Att-SVM "
        "solutions of its selected tokens (kind of solution, rank).</p>"
        "<table><tr><th>head</th><th>attention on selected</th>"
        + "".join(
            f"<th>{html.escape(n)} score: selected is optimal (global / local / neither)</th>"
            for n in summary["score_kinds"]
        )
        + "<th>corr W^mm_F</th><th>corr W^mm_*</th></tr>"
        + _head_rows(summary)
        + "</table>"
        f"<ul>{notes}</ul><h2>Plots</h2>{figures}<h2>Example users</h2>{examples}"
        "</body></html>"
    )


def _verdict(summary: dict) -> str:
    """The plain verdict, first on the page: one sentence per head, in the data's terms."""
    rows = summary.get("verdict") or []
    if not rows:
        return ""
    items = "".join(f"<li>{html.escape(row['sentence'])}</li>" for row in rows)
    return (
        "<h2>Verdict</h2><p>What the heads attend to from the last position, over "
        f"{summary['sequences']} sampled test histories:</p><ul class='verdict'>{items}</ul>"
    )
