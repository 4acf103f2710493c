"""The lens on SASRec+ trained on ML-1M: time the report for 200 test sequences, print its numbers.

    python benchmarks/lens_ml1m.py /tmp/runs/sasrec+ [--sequences 200] [--out /tmp/lens-ml1m]

The run directory comes from ``benchmarks/train_published.py sasrec+``. A run still training
(``RUN.incomplete``) can be read too: its ``model.safetensors`` is the best checkpoint so far
(the epoch count is printed from its ``log.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import conditions
from attnsvm.lens.report import write_report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path)
    parser.add_argument("--sequences", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("/tmp/lens-ml1m"))
    args = parser.parse_args()
    conditions.report()
    run = args.run
    if not run.is_dir() and run.with_name(run.name + ".incomplete").is_dir():
        run = run.with_name(run.name + ".incomplete")
    log = run / "log.jsonl"
    epochs = len(log.read_text().splitlines()) if log.exists() else "?"
    torch.set_num_threads(1)
    start = time.perf_counter()
    report = write_report(run, args.out, args.sequences)
    seconds = time.perf_counter() - start
    lens = json.loads((report.parent / "lens.json").read_text())
    print(
        f"run {run} (epochs logged: {epochs}); {lens['sequences']} sequences; "
        f"report in {seconds:.1f} s: {report}"
    )
    print(
        "| head | tokens/seq | attention on selected (median) | selected = opt (linear) | "
        "g/l/n (linear) | selected = opt (counterf.) | g/l/n (counterf.) | corr W^mm_F | "
        "corr W^mm_* | rank W / W^mm_F / W^mm_* | SVM kinds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for head in lens["heads"]:
        cells = [
            f"L{head['layer']}H{head['head']}",
            f"{head['tokens_per_sequence']:.1f}",
            f"{head['attention_on_selected']['median']:.3f}",
        ]
        for name in ("linear", "counterfactual"):
            info = head["scores"].get(name)
            if info is None:
                cells += ["—", "—"]
                continue
            c = info["classes"]
            cells += [
                f"{info['selected_is_optimal']:.1%}",
                f"{c['global']}/{c['local']}/{c['neither']}",
            ]
        svm = head["svm"]["selected"]
        cells += [f"{svm[n]['correlation']:.3f}" for n in ("frobenius", "nuclear")]
        cells.append(
            f"{head['model']['rank']} / {svm['frobenius']['rank']} / {svm['nuclear']['rank']}"
        )
        cells.append(
            ", ".join(
                f"{n}: {svm[n]['kind']} ({svm[n]['seconds']:.0f} s)"
                for n in ("frobenius", "nuclear")
            )
        )
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
