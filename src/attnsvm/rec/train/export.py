"""A finished run's scoring path as one file another runtime can load: ONNX or TorchScript.

The exported function is what the evaluator calls (``LoadedRun.scores``) without the data
handling around it: ``item_seq`` (B, max_len) int64, internal item ids left-padded with 0 (the
last ``max_len`` items of each history), the model's extra inputs in ``extra_inputs`` order
(SSE-PT's ``users`` (B,) int64, STRec's ``timestamps`` (B, max_len) float64, left-padded as
``item_seq``), then ``seen`` (B, num_items + 1) bool, the items never to recommend (the seen
ones) → ``scores`` (B, num_items + 1) float32, −∞ at column 0 (padding) and where ``seen``.

The file carries what recommending needs besides (``RECIPE_KEY``: the ONNX file's metadata, a
TorchScript archive's extra file, and ``recommend`` in ``<file>.json``): the item id map
(internal id → original id, as text), the user map when the model reads ``users``, the
padding rule and the ranking rule (scores descending, ties to the lower internal id).
``attnsvm.rec.train.export_reader`` ranks from the ONNX file alone, without torch.

- ``onnx``: ``torch.onnx.export`` (the dynamo exporter, opset of torch's choice), the batch
  dimension dynamic. Needs the ``export`` extra (``onnx``, ``onnxscript``; the parity check
  runs the file in ``onnxruntime``).
- ``torchscript``: ``torch.jit.trace`` (a model that branched on its input data would be traced
  along one branch; the parity check on real windows is what catches that).

Before the file is renamed into place, it is loaded back and run on up to ``check_rows`` of the
run's test histories; its scores must equal the evaluator's within ``PARITY_TOLERANCE`` (max
absolute difference), or nothing is written. ``<file>.json`` beside it records the inputs, the
output and the difference measured; the two files are renamed into place together, so a failure
(a full disk included) leaves neither.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attnsvm._atomic import atomic_files, check_output
from attnsvm.errors import ExpectedFailure, InvalidRequest, shown
from attnsvm.extras import require
from attnsvm.rec.data.sequences import EvalTask
from attnsvm.rec.models import SequentialRecommender
from attnsvm.rec.train.runs import LoadedRun, open_run

FORMATS = {"onnx": ".onnx", "torchscript": ".pt"}
PARITY_TOLERANCE = 1e-4
RECIPE_KEY = "attnsvm.recommend"  # ONNX metadata key; a TorchScript extra file of this name
RANKING = "scores descending, ties to the lower internal id; -inf (padding, seen) never ranked"


class ExportError(ExpectedFailure, ValueError):
    """A model the chosen format cannot hold, or an export whose scores differ from PyTorch's."""


class ScoringPath(nn.Module):
    """``(item_seq, *extras, seen) → scores``: ``score_last`` without its Python-side input
    checks, −∞ where ``seen``."""

    def __init__(self, model: SequentialRecommender) -> None:
        super().__init__()
        self.model = model

    def forward(self, item_seq: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
        *extras, seen = inputs
        named = dict(zip(self.model.extra_inputs, extras, strict=True))
        hidden = self.model.last_hidden(self.model.scoring_input(item_seq), **named)
        return self.model.logits(hidden).masked_fill(seen, float("-inf"))


@dataclass(frozen=True)
class Exported:
    path: Path
    format: str
    inputs: list[dict]  # name, shape, dtype of each input, in order
    rows_checked: int
    max_abs_difference: float

    def describe(self) -> str:
        inputs = ", ".join(f"{i['name']} {i['shape']} {i['dtype']}" for i in self.inputs)
        return (
            f"{self.format}: {inputs} → scores; max |Δ| {self.max_abs_difference:.2e} against "
            f"PyTorch on {self.rows_checked} test histories"
        )


def _inputs(model: SequentialRecommender, task: EvalTask, rows: np.ndarray) -> list[torch.Tensor]:
    """The exported function's inputs for ``rows`` of ``task``: windows, the extras, then the
    mask of each row's excluded (seen) items."""
    max_len = model.config.max_len
    history = task.history
    columns = {
        "users": lambda: torch.from_numpy(task.users[rows]),
        "timestamps": lambda: torch.from_numpy(history.padded_times(max_len, rows)),
        "ratings": lambda: torch.from_numpy(history.padded_ratings(max_len, rows)),
    }
    tensors = [torch.from_numpy(history.padded(max_len, rows))]
    for name in model.extra_inputs:
        if name not in columns:
            raise ExportError(f"{type(model).__name__} reads {name!r}, which export cannot feed")
        tensors.append(columns[name]())
    seen = np.zeros((rows.size, model.num_items + 1), dtype=bool)
    offsets, items = task.exclude.offsets, task.exclude.items
    for i, row in enumerate(rows):
        seen[i, items[offsets[row] : offsets[row + 1]]] = True
    return [*tensors, torch.from_numpy(seen)]


def _recipe(run: LoadedRun, names: list[str]) -> dict:
    """What recommending needs besides the network: id maps, the padding and ranking rules."""
    model = run.model
    users = run.user_ids.astype(str).tolist() if "users" in model.extra_inputs else None
    return {
        "version": 1,
        "inputs": names,
        "output": "scores",
        "items": [None, *run.item_ids[1:].astype(str).tolist()],  # internal id → original id
        "users": users,  # the ``users`` input: this list's index, -1 for anyone else
        "padding": {"side": "left", "length": model.config.max_len, "id": 0, "keeps": "last"},
        "seen": "seen",  # the input marking the items never to recommend
        "ranking": RANKING,
    }


def _names(model: SequentialRecommender) -> list[str]:
    return ["item_seq", *model.extra_inputs, "seen"]


def _write(
    format_: str, module: ScoringPath, example: list[torch.Tensor], path: Path, recipe: str
) -> None:
    names = _names(module.model)
    if format_ == "torchscript":
        buffer = io.BytesIO()  # saved to a file, a full disk aborts the process (SIGABRT)
        with warnings.catch_warnings():  # trace's and save's deprecation notices, shape notes
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(module, tuple(example))
            torch.jit.save(traced, buffer, _extra_files={RECIPE_KEY: recipe})
        path.write_bytes(buffer.getvalue())
        return
    batch = torch.export.Dim("batch")
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's progress lines and FutureWarnings
        program = torch.onnx.export(
            module,
            tuple(example),
            dynamo=True,
            input_names=names,
            output_names=["scores"],
            dynamic_shapes=({0: batch}, tuple({0: batch} for _ in example[1:])),  # *inputs
            verbose=False,
        )
        program.model.metadata_props[RECIPE_KEY] = recipe
        program.save(str(path))


def _run_exported(format_: str, path: Path, inputs: list[torch.Tensor], names) -> np.ndarray:
    if format_ == "torchscript":
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # deprecated, still supported
            return torch.jit.load(str(path))(*inputs).numpy()
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, (t.numpy() for t in inputs), strict=True)))[0]


def max_abs_difference(a: np.ndarray, b: np.ndarray) -> float:
    """``max |a − b|``, an entry that is −∞ in both counting as equal (the padding column)."""
    with np.errstate(invalid="ignore"):  # −∞ − −∞ is NaN, and replaced just below
        difference = np.abs(a.astype(np.float64) - b)
    return float(np.max(np.where(np.isneginf(a) & np.isneginf(b), 0.0, difference)))


def export_run(
    run_dir: str | Path, format_: str = "onnx", out: str | Path | None = None, check_rows: int = 64
) -> Exported:
    """Export ``run_dir``'s scoring path (see the module docstring) to ``out`` (default
    ``RUN_DIR/export/model.onnx`` or ``model.pt``), checked against PyTorch first."""
    if format_ not in FORMATS:
        raise InvalidRequest(f"format must be one of {', '.join(FORMATS)}, got {shown(format_)}")
    if format_ == "onnx":  # the exporter, and onnxruntime for the check after it
        require("export", "the ONNX export")
    opened = open_run(run_dir, "test")
    run = opened.run
    if run.baseline:
        raise ExportError(f"{run.config.model.name} is a non-neural baseline: it has no network")
    path = Path(out) if out is not None else run.run_dir / "export" / f"model{FORMATS[format_]}"
    if path.suffix != FORMATS[format_]:
        raise InvalidRequest(f"a {format_} file ends in {FORMATS[format_]}, got {shown(str(path))}")
    check_output(path, folder=False)
    task, model = opened.task, run.model
    rows = np.arange(min(check_rows, len(task)))
    inputs = _inputs(model, task, rows)
    names = _names(model)
    with torch.inference_mode():
        expected = run.scores(task)(rows).masked_fill(inputs[-1], float("-inf")).numpy()
    described = [
        {"name": n, "shape": ["batch", *t.shape[1:]], "dtype": str(t.dtype).removeprefix("torch.")}
        for n, t in zip(names, inputs, strict=True)
    ]
    recipe = _recipe(run, names)
    with atomic_files(path.parent) as temporary:
        written = temporary(path.name)
        module, example = ScoringPath(model).eval(), [t[:2] for t in inputs]
        _write(format_, module, example, written, json.dumps(recipe))
        difference = max_abs_difference(_run_exported(format_, written, inputs, names), expected)
        if not difference <= PARITY_TOLERANCE:
            raise ExportError(
                f"the exported {format_} scores differ from PyTorch's by {difference:.3g} "
                f"(> {PARITY_TOLERANCE}); nothing written"
            )
        exported = Exported(path, format_, described, len(rows), difference)
        record = {**asdict(exported), "path": path.name, "output": "scores (batch, num_items + 1)"}
        record["run"] = str(run.run_dir.resolve())
        record["recommend"] = recipe
        temporary(path.name + ".json").write_text(json.dumps(record, indent=2) + "\n")
    return exported
