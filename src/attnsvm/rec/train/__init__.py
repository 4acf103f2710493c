"""Training: the loop, run directories and checkpoints, DDP, callbacks, and using finished runs."""

from attnsvm.rec.train.callbacks import AttentionSnapshots, Callback, EpochState
from attnsvm.rec.train.checkpoint import RunResult
from attnsvm.rec.train.demo import demo_train
from attnsvm.rec.train.loop import TrainingError
from attnsvm.rec.train.runs import LoadedRun, evaluate_run, load_model, load_run, recommend
from attnsvm.rec.train.trainer import train

__all__ = [
    "AttentionSnapshots",
    "Callback",
    "EpochState",
    "LoadedRun",
    "RunResult",
    "TrainingError",
    "demo_train",
    "evaluate_run",
    "load_model",
    "load_run",
    "recommend",
    "train",
]
