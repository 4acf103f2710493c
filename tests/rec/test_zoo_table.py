"""``benchmarks/zoo.py --table``: means over seeds, the paired test on a shared seed, devices."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from attnsvm.rec.eval.ranking import EvalResult

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _zoo():
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("zoo", BENCHMARKS / "zoo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["zoo"] = module
    spec.loader.exec_module(module)
    return module


def _run(out: Path, folder: str, ndcg: np.ndarray, devices: list[str] | None = None) -> None:
    """A finished run's metrics and test evaluation (an ``.incomplete`` one's partial ones)."""
    path = out / "beauty" / folder
    path.mkdir(parents=True)
    prefix = "partial_" if folder.endswith(".incomplete") else ""
    metrics = {"HR@10": float((ndcg > 0).mean()), "NDCG@10": float(ndcg.mean())}
    record = {"test": metrics, "train_seconds": 10.0, "epochs": 3, "best_epoch": 2}
    if devices is not None:
        record["devices"] = devices
    (path / f"{prefix}metrics.json").write_text(json.dumps(record))
    users = np.arange(ndcg.size)
    result = EvalResult(metrics, {"NDCG@10": ndcg, "HR@10": (ndcg > 0) * 1.0}, "test", users)
    result.save(path / f"{prefix}test_eval.json")


def test_the_table_pairs_rows_on_a_seed_both_have(tmp_path):
    zoo = _zoo()
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 0.2, size=200)
    _run(tmp_path, "sasrec+-paper-seed1", base, ["cpu, 1 thread(s)"])
    _run(tmp_path, "sasrec+-paper-seed2", base * 0.9, ["NVIDIA H200"])
    _run(tmp_path, "bsarec-paper-seed0", base * 2.0)  # no SASRec+ seed 0 to pair with
    seed1 = base + 0.01 + rng.normal(0, 0.001, size=200)
    _run(tmp_path, "bsarec-paper-seed1", seed1)
    _run(tmp_path, "convformer-paper-seed0.incomplete", base)
    rows = {line.split(" | ")[1]: line for line in zoo.table(tmp_path).splitlines()[2:]}
    bsarec = rows["bsarec"].split(" | ")
    assert bsarec[3] == "2"  # seeds
    ndcg = [base.mean() * 2.0, seed1.mean()]
    assert bsarec[5] == f"{np.mean(ndcg):.4f} ± {np.std(ndcg, ddof=1):.4f}"
    assert bsarec[7] == "—"  # runs from before devices were logged
    _run(tmp_path, "bsarec-paper-seed2", base, ["NVIDIA H200"])
    mixed = {line.split(" | ")[1]: line for line in zoo.table(tmp_path).splitlines()[2:]}
    assert mixed["bsarec"].split(" | ")[7] == "NVIDIA H200, —"
    difference = f"{(seed1 - base).mean():+.4f}"  # seed 1 against seed 1, not 0 against 1
    assert bsarec[9].startswith(f"{difference} (p=") and bsarec[9].endswith("seed 1) |")
    assert rows["sasrec+"].split(" | ")[7] == "NVIDIA H200, cpu, 1 thread(s)"
    convformer = rows["convformer"].split(" | ")
    assert convformer[2] == "paper bce, 1 neg. (unfinished): 3 epochs, best 2"
    assert convformer[9] == "— |"  # an unfinished seed 0 against no SASRec+ seed 0


def test_a_zoo_baseline_is_a_run_directory_that_evaluate_reproduces(shared_data, tmp_path):
    from attnsvm.rec.train.runs import open_run

    zoo = _zoo()
    zoo.run_baseline(tmp_path, "ml-100k", "pop", shared_data)
    path = zoo.run_dir(tmp_path, "ml-100k", "pop", "paper", 0)
    recorded = json.loads((path / "metrics.json").read_text())
    assert recorded["test_seconds"] > 0 and recorded["devices"] == ["cpu (numpy)"]
    again = open_run(path).full_ranking()
    assert again.metrics["NDCG@10"] == recorded["test"]["NDCG@10"]
    assert "| ml-100k | pop | — (non-neural) | 1 |" in zoo.table(tmp_path)
