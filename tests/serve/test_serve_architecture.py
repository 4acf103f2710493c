"""Where the server sits: it reads runs (rec) and attention (lens), and only the CLI starts it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "attnsvm"


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return {name for name in names if name.startswith("attnsvm")}


def test_only_the_cli_imports_the_server():
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        if parts[0] in ("serve", "cli"):
            continue
        assert not any(n.startswith("attnsvm.serve") for n in imported(path)), path


def test_the_server_reads_rec_and_the_lens_and_never_the_trainer_or_the_theory():
    allowed = ("attnsvm.serve", "attnsvm.rec", "attnsvm.lens", "attnsvm.errors")
    forbidden = ("attnsvm.rec.train.trainer", "attnsvm.rec.train.loop", "attnsvm.theory")
    for path in (PACKAGE / "serve").rglob("*.py"):
        for name in imported(path):
            assert name.startswith(allowed) and not name.startswith(forbidden), (path, name)


def test_loading_the_server_loads_no_trainer():
    code = (
        "import sys, attnsvm.serve.app, attnsvm.serve.server; "
        "print(sorted(m for m in sys.modules if m in "
        "('attnsvm.rec.train.trainer', 'attnsvm.rec.train.loop')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
