"""The tutorial notebook (``docs/tutorial.ipynb``) runs from top to bottom: its code cells, in
order, as one fresh Python process (no Jupyter needed: the cells are plain Python), in an empty
folder, on the data it generates itself. ``make docs`` renders it into the site."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parent.parent / "docs" / "tutorial.ipynb"


def code_cells() -> list[str]:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]


def test_the_notebooks_cells_are_plain_python():
    for source in code_cells():
        compile(source, str(NOTEBOOK), "exec")  # no IPython magics or shell escapes
        assert not any(line.lstrip().startswith(("%", "!")) for line in source.splitlines())


def test_the_tutorial_notebook_runs_from_top_to_bottom(tmp_path):
    script = "\n\n".join(code_cells())
    # the notebook's own temporary folder (its data cache, its run) inside the test's
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
