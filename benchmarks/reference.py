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
