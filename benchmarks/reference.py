"""Run the same Python snippet against an earlier commit of the package and against this tree.

``checkout(ref)`` extracts ``src/`` of a git commit into a temporary folder (``git archive``:
the repository's state is untouched); ``run_snippet(code, src)`` runs ``code`` in a fresh
interpreter whose ``attnsvm`` is imported from ``src`` (``PYTHONPATH`` comes before the
editable install on ``sys.path``) and returns what the snippet printed as JSON on its last line.
Used by the scripts that compare behaviour or speed before and after a change, in one run.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent
THIS_TREE = REPOSITORY / "src"


def checkout(ref: str, into: Path | None = None) -> Path:
    """``src/`` of commit ``ref``, extracted into ``into`` (a new temporary folder by default)."""
    folder = Path(into or tempfile.mkdtemp(prefix=f"attnsvm-{ref[:12]}-"))
    archive = subprocess.run(
        ["git", "-C", str(REPOSITORY), "archive", "--format=tar", ref, "src"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder / "src"


def describe(ref: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPOSITORY), "log", "-1", "--format=%h %s", ref],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()[:80]


def run_snippet(code: str, src: Path, env: dict[str, str] | None = None) -> Any:
    """Run ``code`` with ``attnsvm`` from ``src``; its last printed line, parsed as JSON."""
    environment = {**os.environ, **(env or {}), "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=environment,
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
    )
    if done.returncode != 0:
        raise RuntimeError(f"snippet failed against {src}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_test_metrics(
    label: str, before: dict, after: dict, shown: Callable[[str], bool]
) -> float:
    """Print the ``shown`` metrics of a run before and after side by side (the columns of
    ``METRICS_HEADER``); returns the largest difference over all of its metrics, infinite where
    a value is NaN or the two runs report different metrics."""
    worst = 0.0
    for metric in sorted(before):
        diff = abs(before[metric] - after.get(metric, float("nan")))
        worst = max(worst, diff) if diff == diff else float("inf")
        if shown(metric):
            print(
                f"{label:<14} {metric:<14} {before[metric]:>10.6f} "
                f"{after.get(metric, float('nan')):>10.6f} {diff:>9.2e}"
            )
    if set(before) != set(after):
        print(f"{label}: metric names differ: {sorted(set(before) ^ set(after))}")
        worst = float("inf")
    return worst


METRICS_HEADER = f"{'run':<14} {'metric':<14} {'before':>10} {'after':>10} {'|diff|':>9}"


def behaviour_verdict(worst: float, tolerance: float) -> int:
    """Print the verdict on the largest difference; the exit status (1 where it passes
    ``tolerance``)."""
    verdict = "kept" if worst <= tolerance else "CHANGED"
    print(f"\nlargest difference over all test metrics: {worst:.2e} → behaviour {verdict}")
    return 0 if worst <= tolerance else 1


def behaviour_kept(
    before: str,
    folder: Path,
    snippets: dict[str, str],
    shown: Callable[[str], bool],
    tolerance: float,
) -> int:
    """Run each named snippet (printing a run's test metrics as JSON) with ``src/`` of commit
    ``before`` and with this tree, each in a fresh interpreter; print the metrics side by side
    and the verdict; the exit status of ``behaviour_verdict``."""
    before_src = checkout(before, folder)
    print(f"before: {describe(before)}\nafter:  this working tree\n")
    print(METRICS_HEADER)
    worst = 0.0
    for label, code in snippets.items():
        runs = run_snippet(code, before_src), run_snippet(code, THIS_TREE)
        worst = max(worst, compare_test_metrics(label, *runs, shown))
    return behaviour_verdict(worst, tolerance)
