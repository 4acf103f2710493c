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

Interrupted at any point (even ``kill -9``), a run is in one of three states, all continued by
``--resume``: no ``resume.pt`` yet (it trains again from the start: the seed makes that the same
run), ``resume.pt`` (it goes on from the last finished epoch), or ``metrics.json`` written (the
results are complete, and only the rename to the final name was left). A lock (``flock`` on
``RUN.incomplete/.lock``, dropped by the kernel when its process ends, however it ends) keeps a
second process out of a run in progress, and no temporary file of an interrupted write survives
into a published run.

Run files are read back checked (``read_model_info``, ``read_id_maps``, ``read_metrics``): a
damaged or hostile file is a ``RunDirError`` naming it, never a traceback or a huge allocation.
"""

from __future__ import annotations

import io
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as serialize

from attnsvm._atomic import check_output, remove_temporaries, write_bytes, write_json, write_text
from attnsvm._files import read_json, require_regular
from attnsvm.errors import ExpectedFailure, UnreadableFile, shown
from attnsvm.rec.config import RunConfig, save_config
from attnsvm.rec.data.splits import Split
from attnsvm.rec.eval.ranking import EvalResult
from attnsvm.rec.train.run_lock import LOCK, RunLock

INCOMPLETE_SUFFIX = ".incomplete"
WEIGHTS = "model.safetensors"
RESUME = "resume.pt"
METRICS = "metrics.json"  # written last: a work folder holding it has all of its results


class RunDirError(ExpectedFailure, ValueError):
    """A missing, incomplete, damaged, busy or clashing run directory."""


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
    # serialized in memory, then written from Python: a full disk is an OSError naming the file
    write_bytes(path, serialize(tensors, metadata=aliases or None))


def weight_shapes(path: Path) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """The shape of every tensor in a weights file and its aliases (tied parameters), from the
    header alone: a model can be checked against them before it is built."""
    try:
        with safe_open(require_regular(path), framework="pt") as file:
            shapes = {key: tuple(file.get_slice(key).get_shape()) for key in file.keys()}  # noqa: SIM118
            aliases = file.metadata() or {}
    except UnreadableFile as error:
        raise RunDirError(str(error)) from None
    except (SafetensorError, OSError) as error:
        raise RunDirError(f"{path}: damaged weights file ({shown(str(error))})") from None
    if not all(isinstance(source, str) and source in shapes for source in aliases.values()):
        raise RunDirError(f"{path}: damaged weights file (an alias names no tensor)")
    return shapes, aliases


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The state dict saved by ``save_weights``, tied parameters under each of their keys."""
    _, aliases = weight_shapes(path)
    try:
        tensors = load_file(path)
    except (SafetensorError, OSError) as error:
        raise RunDirError(f"{path}: damaged weights file ({shown(str(error))})") from None
    for alias, source in aliases.items():
        tensors[alias] = tensors[source]
    return tensors


def check_weights_fit(model: torch.nn.Module, path: Path) -> None:
    """A ``RunDirError`` unless ``path`` holds exactly ``model``'s parameters and shapes; the
    model may live on the meta device (shapes, no storage), so nothing large is allocated."""
    shapes, aliases = weight_shapes(path)
    stored = {**shapes, **{alias: shapes[source] for alias, source in aliases.items()}}
    expected = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    for key in sorted(set(stored) | set(expected)):
        if stored.get(key) != expected.get(key):
            raise RunDirError(
                f"{path}: does not fit the model of model.json ({shown(key)}: "
                f"{stored.get(key, 'absent')} in the file, {expected.get(key, 'absent')} "
                "in the model)"
            )


def load_weights(model: torch.nn.Module, path: Path) -> None:
    """Load safetensors weights saved by ``save_weights`` (strict: every key must match), each
    of the dtype the model's own is and finite: ``load_state_dict`` would cast int8 weights
    silently, and a NaN weight ranks items by garbage (training stops before it saves one)."""
    check_weights_fit(model, path)
    tensors = read_weights(path)
    expected = model.state_dict()
    for key, tensor in sorted(tensors.items()):
        if tensor.dtype != expected[key].dtype:
            raise RunDirError(
                f"{path}: damaged weights ({shown(key)} is stored as {tensor.dtype}, the "
                f"model's is {expected[key].dtype})"
            )
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise RunDirError(f"{path}: damaged weights ({shown(key)} holds NaN or infinity)")
    model.load_state_dict(tensors, strict=True)


def save_resume_state(path: Path, state: dict[str, Any]) -> None:
    buffer = io.BytesIO()  # torch.save to a file reports a full disk as a RuntimeError
    torch.save(state, buffer)
    write_bytes(path, buffer.getvalue())


def load_resume_state(path: Path, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """The state ``save_resume_state`` wrote, holding at least ``keys``; a damaged file (which
    only disk damage or a hand makes: it is written atomically) is a ``RunDirError``."""
    advice = "delete it and --resume again to train the run from its first epoch"
    try:
        state = torch.load(require_regular(path), map_location="cpu", weights_only=True)
    except UnreadableFile as error:
        raise RunDirError(str(error)) from None
    except Exception as error:
        # whatever a damaged file makes torch's unpickler raise (KeyError, IndexError,
        # UnpicklingError, RuntimeError, ...): only torch's code runs here, so no bug of ours
        # can hide behind this
        problem = shown(str(error).splitlines()[0] if str(error) else type(error).__name__)
        raise RunDirError(f"{path}: damaged resume state ({problem}); {advice}") from None
    if not isinstance(state, dict) or not set(keys) <= set(state):
        raise RunDirError(f"{path}: not a resume state of this version; {advice}")
    return state


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
    """The final path of a run and the ``.incomplete`` directory it is written in; ``create``
    and ``for_resume`` hold the run's lock until ``finish`` (or ``release``)."""

    def __init__(self, final: str | Path) -> None:
        final = Path(final)
        if final.name.endswith(INCOMPLETE_SUFFIX):
            final = final.with_name(final.name[: -len(INCOMPLETE_SUFFIX)])
        self.final = final
        self.partial = final.with_name(final.name + INCOMPLETE_SUFFIX)
        self._lock: RunLock | None = None

    @classmethod
    def create(cls, final: str | Path) -> RunDirectory:
        run = cls(final)
        for path in (run.final, run.partial):  # a dangling link would fail only at the publish
            check_output(path, folder=True)
        if run.final.exists():
            raise RunDirError(f"{run.final}: run directory already exists; choose another --out")
        try:
            run.partial.mkdir(parents=True)
        except FileExistsError:
            run._lock = RunLock(run.partial)  # refused while another process works in it
            if (run.partial / "config.json").exists():
                run.release()
                raise RunDirError(
                    f"{run.partial}: an interrupted run is there; continue it with "
                    f"--resume {run.final} or delete it"
                ) from None
            # a start interrupted before it wrote its config left nothing to keep: begin again
            remove_temporaries(run.partial)
            return run
        run._lock = RunLock(run.partial)
        return run

    @classmethod
    def for_resume(cls, path: str | Path, *, lock: bool = True) -> RunDirectory:
        """The interrupted run at ``path`` (its final or its work folder's name), locked unless
        ``lock`` is false (the other processes of a ``torchrun`` job), its temporary files of
        interrupted writes removed."""
        run = cls(path)
        if not run.partial.is_dir():
            if run.final.is_dir():
                raise RunDirError(f"{run.final}: this run finished; there is nothing to resume")
            raise RunDirError(f"{run.partial}: no resumable run state (no such folder)")
        if lock:
            run._lock = RunLock(run.partial)
            remove_temporaries(run.partial)
        if not (run.partial / "config.json").is_file():
            run.release()
            raise RunDirError(
                f"{run.partial}: interrupted before it wrote its config; start it again with "
                "the same train command (it reuses the folder)"
            )
        return run

    @property
    def work(self) -> Path:
        """Where files go while the run is in progress."""
        return self.partial

    @property
    def complete(self) -> bool:
        """Whether every result is written (``metrics.json`` comes last), only the rename left."""
        return (self.partial / METRICS).is_file()

    @property
    def resumable(self) -> bool:
        """Whether an epoch's state was saved; without it the run trains from its first epoch."""
        return (self.partial / RESUME).is_file()

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
        """Write the results, ``metrics.json`` last, then rename the directory to its final
        name."""
        test.save(self.work / "test_eval.json")
        write_json(self.work / METRICS, metrics)
        return self.finish()

    def finish(self) -> Path:
        """Drop the resume state, the lock file and any temporary file, then publish the
        directory under its final name (an atomic rename) and release the lock. A kill before
        the rename leaves a complete work folder, which ``--resume`` publishes."""
        (self.partial / RESUME).unlink(missing_ok=True)
        remove_temporaries(self.partial)
        (self.partial / LOCK).unlink(missing_ok=True)  # the open descriptor keeps the lock
        os.replace(self.partial, self.final)
        self.release()
        return self.final

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def published_result(final: Path) -> RunResult:
    """The ``RunResult`` of a published run, from its ``metrics.json``."""
    metrics = read_metrics(final)
    return RunResult(
        final,
        metrics["test"],
        metrics["valid"],
        metrics["best_epoch"],
        metrics["epochs"],
        metrics["stopped_early"],
        float(metrics["train_seconds"]),
    )


def finished_run(path: str | Path) -> Path:
    """``path`` as a finished run directory, or a clear error."""
    path = Path(path)
    resume = f"continue it with attnsvm train --resume {RunDirectory(path).final}"
    if path.name.endswith(INCOMPLETE_SUFFIX):  # the work folder itself: files, but no result
        raise RunDirError(f"{path}: the run did not finish; {resume}")
    if not path.is_dir():
        partial = RunDirectory(path).partial
        if partial.is_dir():
            raise RunDirError(f"{path}: the run did not finish; {resume}")
        raise RunDirError(f"{path}: no such run directory")
    for name in ("config.json", "model.json", "id_maps.json"):
        if not (path / name).is_file():
            raise RunDirError(f"{path}: not a run directory ({name} is missing)")
    baseline = read_model_info(path).get("baseline", False)
    if not baseline and not (path / WEIGHTS).is_file():  # a baseline is refitted, not loaded
        raise RunDirError(f"{path}: not a run directory ({WEIGHTS} is missing)")
    return path


# -- run files read back, checked ----------------------------------------------------------------


def _run_json(path: Path, shape: dict[str, type | tuple[type, ...]]) -> dict[str, Any]:
    """A run's JSON file: an object holding each key of ``shape`` with a value of its type."""
    try:
        data = read_json(path)
    except UnreadableFile as error:
        raise RunDirError(str(error)) from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: damaged (not a JSON object)")
    for key, kind in shape.items():
        value = data.get(key)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise RunDirError(f"{path}: damaged ({key!r} is {shown(value)})")
    return data


def read_model_info(folder: Path) -> dict[str, Any]:
    """``model.json``: the model's name, its config and (a neural model) its catalogue size."""
    path = folder / "model.json"
    info = _run_json(path, {"model": str, "model_config": dict})
    if not info.get("baseline", False):
        info = _run_json(path, {"model": str, "model_config": dict, "num_items": int})
        if not 2 <= info["num_items"] < 2**31:
            raise RunDirError(f"{path}: damaged (num_items is {info['num_items']})")
    return info


def read_id_maps(folder: Path, num_items: int | None = None) -> dict[str, list]:
    """``id_maps.json``: the external id of every internal item and user (plain ids only; with
    ``num_items``, one per item and the padding placeholder)."""
    path = folder / "id_maps.json"
    maps = _run_json(path, {"items": list, "users": list})
    for key in ("items", "users"):
        if not all(isinstance(i, int | str) and not isinstance(i, bool) for i in maps[key]):
            raise RunDirError(f"{path}: damaged ({key} holds something other than ids)")
    if num_items is not None and len(maps["items"]) != num_items + 1:
        raise RunDirError(
            f"{path}: damaged ({len(maps['items'])} item ids for {num_items} items and padding)"
        )
    return maps


def read_metrics(folder: Path) -> dict[str, Any]:
    """``metrics.json``: test and validation metrics, epochs, timings."""
    shape = {
        "test": dict,
        "valid": dict,
        "best_epoch": int,
        "epochs": int,
        "stopped_early": bool,
        "train_seconds": int | float,
    }
    return _run_json(folder / METRICS, shape)
