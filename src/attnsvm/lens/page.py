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
tr.mark{background:#fff4cc}.user{margin-bottom:2em}img{max-width:100%}pre{font-size:12px}"""


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


def _head_rows(summary: dict) -> str:
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
    return "".join(rows)


def report_html(summary: dict, images: dict[str, bytes], examples: str) -> str:
    """The page: ``summary`` (``LensResult.summary``), ``images`` (name → PNG), ``examples``."""
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
        + _head_rows(summary)
        + "</table>"
        f"<ul>{notes}</ul><h2>Plots</h2>{figures}<h2>Example users</h2>{examples}"
        "</body></html>"
    )
