"""``export_run``: the scoring path as ONNX (run in onnxruntime) or TorchScript, equal to
PyTorch's scores within 1e-4."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.errors import InvalidRequest
from attnsvm.rec.train.export import PARITY_TOLERANCE, export_run, max_abs_difference
from attnsvm.rec.train.runs import open_run


def evaluator_scores(run_dir):
    """Every test history as a padded window, and the evaluator's scores of it."""
    opened = open_run(run_dir, "test")
    task, run = opened.task, opened.run
    rows = np.arange(len(task))
    windows = task.history.padded(run.model.config.max_len, rows)
    with torch.inference_mode():
        return windows, run.scores(task)(rows).numpy()


def test_onnx_scores_equal_pytorchs_in_onnxruntime(trained_run, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    exported = export_run(trained_run, "onnx", tmp_path / "model.onnx")
    assert exported.max_abs_difference <= PARITY_TOLERANCE
    windows, expected = evaluator_scores(trained_run)
    session = onnxruntime.InferenceSession(str(exported.path))
    seen = np.zeros(expected.shape, dtype=bool)  # nothing masked: the bare scores
    (got,) = session.run(None, {"item_seq": windows, "seen": seen})  # a batch of another size
    assert got.shape == expected.shape
    assert max_abs_difference(got, expected) <= PARITY_TOLERANCE
    record = json.loads((tmp_path / "model.onnx.json").read_text())
    assert record["inputs"] == [
        {"name": "item_seq", "shape": ["batch", 12], "dtype": "int64"},
        {"name": "seen", "shape": ["batch", 31], "dtype": "bool"},
    ]


def test_torchscript_scores_equal_pytorchs(trained_run, tmp_path):
    exported = export_run(trained_run, "torchscript", tmp_path / "model.pt")
    windows, expected = evaluator_scores(trained_run)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated, still here
        seen = torch.zeros(expected.shape, dtype=torch.bool)
        got = torch.jit.load(str(exported.path))(torch.from_numpy(windows), seen).numpy()
    assert max_abs_difference(got, expected) <= PARITY_TOLERANCE


def test_bad_formats_and_names_are_refused(trained_run, tmp_path):
    with pytest.raises(InvalidRequest, match="format must be one of onnx, torchscript"):
        export_run(trained_run, "tflite", tmp_path / "model.tflite")
    with pytest.raises(InvalidRequest, match=r"a torchscript file ends in \.pt"):
        export_run(trained_run, "torchscript", tmp_path / "model.onnx")
    assert list(tmp_path.iterdir()) == []


def test_the_command_exports_into_the_run_by_default(trained_run, tmp_path):
    run_dir = shutil.copytree(trained_run, tmp_path / "run")  # the shared run stays as it is
    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "torchscript"])
    assert result.exit_code == 0, result.output
    assert (run_dir / "export" / "model.pt").is_file()
    assert "max |Δ|" in result.output
