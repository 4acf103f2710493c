"""The slim install: the extras of ``pyproject.toml`` are the ones ``attnsvm.extras`` names, every
optional import is one of theirs, and a command whose extra is missing says, in one line, which
extra to install (each extra's modules hidden in a subprocess, as if never installed)."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from attnsvm.extras import EXTRA_MODULES, MODULE_EXTRAS, MissingExtra, missing_extra, require

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def distribution(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def extra_distributions(extra: str) -> set[str]:
    """The distributions ``pip install 'attnsvm[extra]'`` asks for, other extras' included."""
    found = set()
    for requirement in PROJECT["optional-dependencies"][extra]:
        if requirement.startswith("attnsvm["):
            for inner in requirement[len("attnsvm[") : requirement.index("]")].split(","):
                found |= extra_distributions(inner)
        else:
            found.add(distribution(requirement))
    return found


@functools.cache
def installed_modules() -> dict[str, list[str]]:
    return metadata.packages_distributions()  # every installed distribution read: seconds


def providers(module: str) -> set[str]:
    names = installed_modules().get(module, [])
    return {name.lower().replace("_", "-") for name in names}


@pytest.mark.parametrize("extra", sorted(EXTRA_MODULES))
def test_every_module_of_an_extra_is_installed_by_that_extra(extra):
    for module in EXTRA_MODULES[extra]:
        assert providers(module) & extra_distributions(extra), (extra, module)


def test_all_is_every_extra_and_the_core_has_none_of_their_modules():
    assert extra_distributions("all") == set().union(*map(extra_distributions, EXTRA_MODULES))
    core = {distribution(requirement) for requirement in PROJECT["dependencies"]}
    for module in MODULE_EXTRAS:
        assert not providers(module) & core, module


def imported_top_level_modules() -> set[str]:
    names = set()
    for path in (ROOT / "src" / "attnsvm").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.partition(".")[0])
    return names


def test_every_import_outside_the_core_belongs_to_an_extra():
    core = {distribution(requirement) for requirement in PROJECT["dependencies"]}
    outside = {
        module
        for module in imported_top_level_modules() - set(sys.stdlib_module_names) - {"attnsvm"}
        if not providers(module) & core
    }
    # installed with an extra's distribution (Optuna's SQLAlchemy, FastAPI's Starlette and
    # pydantic), or looked up before use (MaTrRec's optional mamba_ssm kernels)
    installed_with_another = {"sqlalchemy", "starlette", "pydantic", "mamba_ssm"}
    assert outside - installed_with_another <= set(MODULE_EXTRAS)


def test_missing_extra_names_the_smallest_extra_and_ignores_other_errors():
    line = str(missing_extra(ModuleNotFoundError("no", name="matplotlib.pyplot"), "the plot"))
    assert line == (
        "the plot needs the 'plots' extra: pip install 'attnsvm[plots]' "
        "(module 'matplotlib' is not installed)"
    )
    assert missing_extra(ModuleNotFoundError("no", name="somewhere_else"), "x") is None
    assert missing_extra(ValueError("no"), "x") is None
    reworded = missing_extra(MissingExtra("serve", "cvxpy", "the server"), "attnsvm explore")
    assert str(reworded).startswith("attnsvm explore needs the 'serve' extra")


def test_require_names_the_first_missing_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    with pytest.raises(MissingExtra, match=r"^the export needs the 'export' extra: .*'onnxscript'"):
        require("export", "the export")


#: hides modules as if they were not installed, then runs the command line
HIDING = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = ["attnsvm", *sys.argv[2:]]
from attnsvm.cli.main import app
app()
"""


def run_without(modules, arguments: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", HIDING, ",".join(modules), *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def command_arguments(command: str, folder: Path) -> list[str]:
    if command == "tune":
        (folder / "run.toml").write_text('[model]\nname = "pop"\n[data]\ndataset = "synthetic"\n')
        (folder / "space.toml").write_text("[train.lr]\nlow = 1e-4\nhigh = 1e-2\n")
        return ["tune", "--config", str(folder / "run.toml"), "--space", str(folder / "space.toml")]
    return {
        "theory": ["theory", "list"],
        "lens": ["lens", str(folder)],
        "serve": ["serve", str(folder)],
        "explore": ["explore", str(folder)],
        "export": ["export", str(folder), "--format", "onnx"],
        "rl": ["rl", "episodes", str(folder / "sim"), "--policy", "random", "--out", str(folder)],
    }[command]


@pytest.mark.parametrize(
    ("extra", "command"),
    [
        ("theory", "theory"),
        ("theory", "lens"),
        ("serve", "serve"),
        ("serve", "explore"),
        ("export", "export"),
        ("tune", "tune"),
        ("plots", "rl"),
    ],
)
def test_a_command_without_its_extra_says_in_one_line_which_to_install(extra, command, tmp_path):
    done = run_without(EXTRA_MODULES[extra], command_arguments(command, tmp_path))
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(
        f"error: attnsvm {command} needs the '{extra}' extra: pip install 'attnsvm[{extra}]' "
    ), lines[0]
