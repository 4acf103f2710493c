"""The package's shape, checked on the source: who may import whom, no import circles, no file
too long to read in one sitting, no lens-only parameter in a model's ``forward``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "attnsvm"
MODULES = {
    ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__"): path
    for path in sorted(PACKAGE.rglob("*.py"))
}


def imports(module: str) -> set[str]:
    """Every attnsvm module ``module`` imports, at the top or inside a function."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            names = [f"{base}.{alias.name}" for alias in node.names]
            names = [name if name in MODULES else base for name in names]
        else:
            continue
        found.update(name for name in names if name in MODULES and name != module)
    return found


GRAPH = {module: imports(module) for module in MODULES}


def test_theory_and_rec_never_import_each_other_and_nothing_imports_the_cli():
    for module, targets in GRAPH.items():
        for target in targets:
            assert not (module.startswith("attnsvm.theory") and target.startswith("attnsvm.rec"))
            assert not (module.startswith("attnsvm.rec") and target.startswith("attnsvm.theory"))
            if target.startswith("attnsvm.cli"):
                assert module.startswith("attnsvm.cli"), f"{module} imports {target}"


def test_the_lens_reads_runs_and_never_reaches_into_the_trainer():
    training = {"attnsvm.rec.train", "attnsvm.rec.train.trainer", "attnsvm.rec.train.loop"}
    for module, targets in GRAPH.items():
        if module.startswith("attnsvm.lens"):
            assert not targets & training, f"{module} imports {sorted(targets & training)}"


def test_there_is_no_import_circle():
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            # a package and the modules its __init__ re-exports are one unit, not a circle
            real = [m for m in component if MODULES[m].name != "__init__.py"]
            if len(real) > 1:
                circles.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            visit(module)
    assert circles == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_source_file_is_over_400_lines(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= 400, f"{MODULES[module].relative_to(SRC)} has {lines} lines"


def test_no_model_forward_takes_a_lens_only_parameter():
    for path in (PACKAGE / "rec" / "models").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "forward":
                names = {a.arg for a in [*node.args.args, *node.args.kwonlyargs]}
                assert not names & {"return_attention", "return_layer_inputs"}, path.name


def test_loading_the_lens_loads_no_trainer():
    import subprocess
    import sys

    code = (
        "import sys, attnsvm.lens.report, attnsvm.lens.run; "
        "print(sorted(m for m in sys.modules if m in "
        "('attnsvm.rec.train.trainer', 'attnsvm.rec.train.loop')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
