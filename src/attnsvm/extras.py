"""The optional parts of the install: which extra brings which module, and the one line that
says what to install when one is missing.

The core install (``pip install attnsvm``) trains, evaluates and recommends. The rest lives in
extras (``pyproject.toml``): ``theory`` (the Att-SVM solvers and figures: the theory lab and the
lens), ``serve`` (the HTTP API and the explorer), ``export`` (ONNX), ``tune`` (Optuna) and
``plots`` (matplotlib); ``all`` is every one of them.

``MODULE_EXTRAS`` names, for every top-level module that only an extra installs, the smallest
extra that brings it. ``missing_extra(error)`` turns a ``ModuleNotFoundError`` of such a module
into that extra's one-line message; the CLI's error boundary prints it for any command, so an
optional import needs no handling of its own. ``require(extra, feature)`` checks that every
module of an extra is there before long work that would need one of them only at its end (a
study's plot, an export's parity check), and raises ``MissingExtra``.

A leaf module beside ``attnsvm.errors``: every part of the package may import it.
"""

from __future__ import annotations

import importlib.util

from attnsvm.errors import ExpectedFailure

#: extra → the top-level modules it installs that the package imports (pyproject.toml's
#: [project.optional-dependencies]; tests/test_extras.py checks the two agree)
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "theory": ("cvxpy", "clarabel", "scs", "matplotlib"),
    "serve": ("fastapi", "fastapi_offline", "uvicorn", "cvxpy", "clarabel", "scs"),
    "export": ("onnx", "onnxscript", "onnxruntime"),
    "tune": ("optuna", "matplotlib"),
    "plots": ("matplotlib",),
}

#: top-level module → the smallest extra that installs it
MODULE_EXTRAS: dict[str, str] = {
    module: min(
        (e for e in EXTRA_MODULES if module in EXTRA_MODULES[e]),
        key=lambda e: len(EXTRA_MODULES[e]),
    )
    for module in sorted({m for modules in EXTRA_MODULES.values() for m in modules})
}


def install_hint(extra: str) -> str:
    return f"pip install 'attnsvm[{extra}]'"


class MissingExtra(ExpectedFailure, ModuleNotFoundError):
    """An optional module that is not installed, named with the extra that installs it."""

    def __init__(self, extra: str, module: str, feature: str) -> None:
        self.extra = extra
        super().__init__(
            f"{feature} needs the '{extra}' extra: {install_hint(extra)} "
            f"(module {module!r} is not installed)",
            name=module,
        )


def missing_extra(error: BaseException, feature: str) -> MissingExtra | None:
    """``error`` as the one-line ``MissingExtra`` of ``feature`` when it is a missing module that
    an extra installs (``MissingExtra`` itself: reworded for ``feature``); ``None`` otherwise."""
    if not isinstance(error, ModuleNotFoundError) or not error.name:
        return None
    module = error.name.partition(".")[0]
    extra = getattr(error, "extra", None) or MODULE_EXTRAS.get(module)
    return None if extra is None else MissingExtra(extra, module, feature)


def require(extra: str, feature: str) -> None:
    """Raise ``MissingExtra`` unless every module of ``extra`` can be imported."""
    for module in EXTRA_MODULES[extra]:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(extra, module, feature)
