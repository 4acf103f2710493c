"""The exported file carries what recommending needs (id maps, padding, the seen mask as an
input), and ``export_reader`` gives ``attnsvm recommend``'s top-k from that file alone, in a
process that never imports torch nor the models."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
import zipfile
from dataclasses import replace

import numpy as np
import pytest
import torch
from train_helpers import tiny_config
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.config import ModelChoice
from attnsvm.rec.train import train
from attnsvm.rec.train.export import RECIPE_KEY, export_run
from attnsvm.rec.train.runs import load_run, user_history

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

READER = """
import json, sys
from attnsvm.rec.train.export_reader import ExportedRecommender

model = ExportedRecommender(sys.argv[1], threads=1)
cases = json.loads(sys.stdin.read())
out = [model.recommend(c["history"], c["k"], user=c.get("user")) for c in cases]
assert "torch" not in sys.modules and "attnsvm.rec.models" not in sys.modules
print(json.dumps(out))
"""


def read_exported(path, cases: list[dict]) -> list[list[str]]:
    """The reader's lists, from a fresh interpreter that is given nothing but the file."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", READER, str(path)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def cli_recommend(run_dir, k: int, user=None, history=None) -> list[str]:
    query = ["--user", str(user)] if user is not None else ["--history", " ".join(history)]
    result = CliRunner().invoke(app, ["recommend", str(run_dir), *query, "-k", str(k)])
    assert result.exit_code == 0, result.output
    return result.output.split()


def cases_and_expected(run_dir, users: list, histories: list[list[str]], k: int = 10):
    run = load_run(run_dir)
    cases, expected = [], []
    for user in users:
        items = [str(item) for item in user_history(run, user).items]
        cases.append({"history": items, "k": k, "user": str(user)})
        expected.append(cli_recommend(run_dir, k, user=user))
    for history in histories:
        cases.append({"history": history, "k": k})
        expected.append(cli_recommend(run_dir, k, history=history))
    return cases, expected


def only_the_file(exported, tmp_path):
    """The ONNX file alone in a folder of its own: no run, no ``.json`` beside it."""
    alone = tmp_path / "alone"
    alone.mkdir()
    return shutil.copy(exported.path, alone / "model.onnx")


def test_the_reader_equals_attnsvm_recommend_from_the_file_alone(trained_run, tmp_path):
    exported = export_run(trained_run, "onnx", tmp_path / "model.onnx")
    users = [100, 101, 105, 117, 150, 219]
    long = [str((3 * step) % 30 + 1) for step in range(17)]  # longer than the window (12)
    histories = [["1", "4", "7"], ["30"], long, ["5", "5", "8", "5"]]
    cases, expected = cases_and_expected(trained_run, users, histories)
    cases.append({**cases[0], "k": 3})
    expected.append(expected[0][:3])
    assert read_exported(only_the_file(exported, tmp_path), cases) == expected
    for case, got in zip(cases, expected, strict=True):
        assert not set(got) & set(case["history"])  # seen items never come back


def test_the_artefact_records_the_id_map_padding_and_seen_input(trained_run, tmp_path):
    export_run(trained_run, "onnx", tmp_path / "model.onnx")
    model = onnx.load(str(tmp_path / "model.onnx"))
    recipe = json.loads({p.key: p.value for p in model.metadata_props}[RECIPE_KEY])
    run = load_run(trained_run)
    assert recipe["items"] == [None, *run.item_ids[1:].astype(str).tolist()]
    assert recipe["padding"] == {"side": "left", "length": 12, "id": 0, "keeps": "last"}
    assert [i.name for i in model.graph.input] == recipe["inputs"] == ["item_seq", "seen"]
    record = json.loads((tmp_path / "model.onnx.json").read_text())
    assert record["recommend"] == recipe
    assert record["inputs"][-1] == {"name": "seen", "shape": ["batch", 31], "dtype": "bool"}
    export_run(trained_run, "torchscript", tmp_path / "model.pt")
    with zipfile.ZipFile(tmp_path / "model.pt") as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(f"extra/{RECIPE_KEY}")]
        assert json.loads(archive.read(name)) == recipe


def test_torchscript_masks_the_seen_input(trained_run, tmp_path):
    exported = export_run(trained_run, "torchscript", tmp_path / "model.pt")
    window = torch.zeros((1, 12), dtype=torch.int64)
    window[0, -2:] = torch.tensor([3, 6])
    seen = torch.zeros((1, 31), dtype=torch.bool)
    seen[0, [3, 6]] = True
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scores = torch.jit.load(str(exported.path))(window, seen)[0].numpy()
    assert np.isneginf(scores[[0, 3, 6]]).all() and np.isfinite(np.delete(scores, [0, 3, 6])).all()


def test_a_model_with_a_user_table_reads_the_user_map(walks, tmp_path):
    config = tiny_config(walks, model="ssept", epochs=2)
    fields = {**config.model.overrides, "user_size": 4, "user_sse": 0.0}
    config = replace(config, model=ModelChoice("ssept", fields))
    run_dir = train(config, tmp_path / "ssept", show_progress=False).run_dir
    exported = export_run(run_dir, "onnx", tmp_path / "model.onnx")
    cases, expected = cases_and_expected(run_dir, [100, 133, 208], [["2", "5"]], k=5)
    assert read_exported(only_the_file(exported, tmp_path), cases) == expected


def test_ties_go_to_the_lower_internal_id_and_seen_items_never_come_back(tmp_path):
    """A hand-made graph with equal scores: the reader's ranking rule alone."""
    from onnx import TensorProto, helper

    from attnsvm.rec.train.export_reader import ExportedRecommender

    base = helper.make_tensor("base", TensorProto.FLOAT, [1, 6], [0, 1, 2, 2, 1, 2])
    minus = helper.make_tensor("minus", TensorProto.FLOAT, [], [-np.inf])
    graph = helper.make_graph(
        [helper.make_node("Where", ["seen", "minus", "base"], ["scores"])],
        "ties",
        [
            helper.make_tensor_value_info("item_seq", TensorProto.INT64, ["batch", 3]),
            helper.make_tensor_value_info("seen", TensorProto.BOOL, ["batch", 6]),
        ],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 6])],
        [base, minus],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    recipe = {
        "inputs": ["item_seq", "seen"],
        "items": [None, "a", "b", "c", "d", "e"],
        "padding": {"side": "left", "length": 3, "id": 0, "keeps": "last"},
    }
    helper.set_model_props(model, {RECIPE_KEY: json.dumps(recipe)})
    onnx.save(model, tmp_path / "ties.onnx")
    reader = ExportedRecommender(tmp_path / "ties.onnx")
    assert reader.recommend(["c"], k=3) == ["b", "e", "a"]  # b, e tie at 2; a, d at 1
    assert reader.recommend(["c", "a", "b"], k=5) == ["e", "d"]  # fewer rankable than k
    with pytest.raises(ValueError, match="unknown item id"):
        reader.recommend(["c", "zz"], k=2)
