"""Run directories, checkpoints and resume state; every write is atomic (temp file + rename).

A run trains inside ``RUN_DIR.incomplete/`` and is renamed to ``RUN_DIR`` only once everything
is written, so a ``RUN_DIR`` is always whole and an interrupted run is visibly incomplete (and
resumable). Layout of a finished run::

    RUN_DIR/
      config.json          RunConfig, the loss resolved (attnsvm.rec.config)
      model.json           model name, num_items and the model's full config
      model.safetensors    the best weights (by the validation metric)
      id_maps.json         external id of every internal item and user (index = internal id)
      metrics.json         best validation metrics, test metrics, epochs, timings
      test_eval.json/.npz  the test EvalResult with per-user metric arrays (for `compare`)
      log.jsonl            one JSON record per epoch
      attention/           per-epoch attention projections, if the AttentionSnapshots callback ran

While running, ``resume.pt`` holds the latest epoch's state (weights, optimiser, scheduler, RNG,
epoch counters) as tensors and plain Python values only, so it loads under
``torch.load(weights_only=True)``; it is deleted when the run finishes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from attnsvm._atomic import atomic_path, write_json, write_text
from attnsvm.rec.config import RunConfig, save_config
from attnsvm.rec.data.splits import Split
from attnsvm.rec.eval.ranking import EvalResult

INCOMPLETE_SUFFIX = ".incomplete"
WEIGHTS = "model.safetensors"
RESUME = "resume.pt"


class RunDirError(ValueError):
    """A missing, incomplete or clashing run directory."""


def save_weights(model: torch.nn.Module, path: Path) -> None:
    """The state dict as safetensors; tied parameters are stored once, under their first key."""
    tensors: dict[str, torch.Tensor] = {}
    seen: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.stride())
        if key in seen and tensor.numel():
            aliases[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = tensor.detach().contiguous().cpu()
    with atomic_path(path) as temporary:
        save_file(tensors, temporary, metadata=aliases or None)


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The state dict saved by ``save_weights``, tied parameters under each of their keys."""
    from safetensors import safe_open

    tensors = load_file(path)
    with safe_open(path, framework="pt") as file:
        aliases = file.metadata() or {}
    for alias, source in aliases.items():
        tensors[alias] = tensors[source]
    return tensors


def load_weights(model: torch.nn.Module, path: Path) -> None:
    """Load safetensors weights saved by ``save_weights`` (strict: every key must match)."""
    model.load_state_dict(read_weights(path), strict=True)


def save_resume_state(path: Path, state: dict[str, Any]) -> None:
    with atomic_path(path) as temporary:
        torch.save(state, temporary)


def load_resume_state(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    test: dict[str, float]  # test metrics of the best checkpoint
    valid: dict[str, float]  # validation metrics of the best epoch
    best_epoch: int
    epochs: int  # epochs trained
    stopped_early: bool
    train_seconds: float


def default_run_dir(config: RunConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dataset = Path(config.data.dataset).stem
    return Path("runs") / f"{config.model.name}-{dataset}-{stamp}"


class RunDirectory:
    """The final path of a run and the ``.incomplete`` directory it is written in."""

    def __init__(self, final: str | Path) -> None:
        final = Path(final)
        if final.name.endswith(INCOMPLETE_SUFFIX):
            final = final.with_name(final.name[: -len(INCOMPLETE_SUFFIX)])
        self.final = final
        self.partial = final.with_name(final.name + INCOMPLETE_SUFFIX)

    @classmethod
    def create(cls, final: str | Path) -> RunDirectory:
        run = cls(final)
        if run.final.exists():
            raise RunDirError(f"{run.final}: run directory already exists; choose another --out")
        if run.partial.exists():
            raise RunDirError(
                f"{run.partial}: an interrupted run is there; continue it with "
                f"--resume {run.final} or delete it"
            )
        run.partial.mkdir(parents=True)
        return run

    @classmethod
    def for_resume(cls, path: str | Path) -> RunDirectory:
        run = cls(path)
        if run.final.exists() and not run.partial.exists():
            raise RunDirError(f"{run.final}: this run finished; there is nothing to resume")
        if not (run.partial / RESUME).exists():
            raise RunDirError(f"{run.partial}: no resumable run state ({RESUME}) found")
        return run

    @property
    def work(self) -> Path:
        """Where files go while the run is in progress."""
        return self.partial

    def write_header(self, config: RunConfig, model_info: dict[str, Any], split: Split) -> None:
        """``config.json``, ``model.json`` and ``id_maps.json``: what the run is, written before
        it trains (neural runs) or fits (baselines)."""
        save_config(config, self.work / "config.json")
        write_json(self.work / "model.json", {**model_info, "num_items": split.num_items})
        maps = {"items": split.item_ids.tolist(), "users": split.user_ids.tolist()}
        write_json(self.work / "id_maps.json", maps)

    def write_log(self, history: list[dict[str, Any]]) -> None:
        """``log.jsonl``: one record per epoch so far."""
        write_text(self.work / "log.jsonl", "".join(json.dumps(r) + "\n" for r in history))

    def publish(self, metrics: dict[str, Any], test: EvalResult) -> Path:
        """Write the results, then rename the directory to its final name."""
        test.save(self.work / "test_eval.json")
        write_json(self.work / "metrics.json", metrics)
        return self.finish()

    def finish(self) -> Path:
        """Drop the resume state and publish the directory under its final name (atomic rename)."""
        (self.partial / RESUME).unlink(missing_ok=True)
        os.replace(self.partial, self.final)
        return self.final


def finished_run(path: str | Path) -> Path:
    """``path`` as a finished run directory, or a clear error."""
    path = Path(path)
    if path.name.endswith(INCOMPLETE_SUFFIX):  # the work folder itself: files, but no result
        raise RunDirError(f"{path}: the run did not finish; continue it with --resume {path}")
    if not path.is_dir():
        partial = RunDirectory(path).partial
        if partial.is_dir():
            raise RunDirError(f"{path}: the run did not finish; continue it with --resume {path}")
        raise RunDirError(f"{path}: no such run directory")
    for name in ("config.json", "model.json", "id_maps.json"):
        if not (path / name).is_file():
            raise RunDirError(f"{path}: not a run directory ({name} is missing)")
    baseline = json.loads((path / "model.json").read_text()).get("baseline", False)
    if not baseline and not (path / WEIGHTS).is_file():  # a baseline is refitted, not loaded
        raise RunDirError(f"{path}: not a run directory ({WEIGHTS} is missing)")
    return path
