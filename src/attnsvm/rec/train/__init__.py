"""Training: the loop, run directories and checkpoints, DDP, callbacks, and using finished runs.

The names below load their module on first use, so that reading a finished run (``runs``, as
the lens does) never imports the trainer.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "AttentionSnapshots": "callbacks",
    "Callback": "callbacks",
    "EpochState": "callbacks",
    "RunResult": "checkpoint",
    "demo_train": "demo",
    "TrainingError": "loop",
    "LoadedRun": "runs",
    "evaluate_run": "runs",
    "load_model": "runs",
    "load_run": "runs",
    "recommend": "runs",
    "train": "trainer",
    "training_loop": "trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
