"""The whole hostile-input corpus, and its outcomes counted by class (benchmarks/RESULTS.md):

.venv/bin/python tests/reliability/reliability_corpus.py
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections import Counter
from pathlib import Path

from reliability_command_cases import command_cases
from reliability_config_cases import config_cases
from reliability_data_cases import data_cases
from reliability_download_cases import download_cases
from reliability_harness import (
    ACCEPTED,
    REFUSED,
    USAGE,
    Workspace,
    make_shared_inputs,
    run_case,
)
from reliability_run_cases import run_cases
from reliability_table_cases import table_cases

CORPUS = (
    data_cases() + table_cases() + config_cases() + run_cases() + download_cases() + command_cases()
)
COLUMNS = {
    REFUSED: "refused, one clear line",
    ACCEPTED: "accepted, read correctly",
    USAGE: "option error (click)",
    **{"traceback": "traceback", "hang": "hang", "wrong": "wrong or unexpected"},
}


def outcome_table() -> str:
    """Every case run once; a markdown table of outcomes by class (a failure is counted under
    its own column, whatever the case expected)."""
    counts: Counter = Counter()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        with contextlib.redirect_stdout(io.StringIO()):  # the shared runs' epoch lines
            (root / "shared").mkdir()
            shared = make_shared_inputs(root / "shared")
        for index, case in enumerate(CORPUS):
            (root / f"case-{index}").mkdir()
            outcome = run_case(case, Workspace(root / f"case-{index}", shared))
            expected = outcome.result == case.expect
            counts[case.kind, outcome.result if expected else "wrong"] += 1
    kinds = list(dict.fromkeys(case.kind for case in CORPUS))
    lines = [
        "| class | cases | " + " | ".join(COLUMNS.values()) + " |",
        "|---" * (len(COLUMNS) + 2) + "|",
    ]
    for label, rows in [*((kind, [kind]) for kind in kinds), ("total", kinds)]:
        by_column = [sum(counts[kind, column] for kind in rows) for column in COLUMNS]
        lines.append(f"| {label} | {sum(by_column)} | " + " | ".join(map(str, by_column)) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(outcome_table())
