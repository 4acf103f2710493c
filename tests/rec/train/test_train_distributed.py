"""DDP under torchrun (gloo, 2 processes) against one process: same metrics, same step."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from train_helpers import STEP_LOSSES, step_config

from attnsvm.rec.train import distributed, load_run
from attnsvm.rec.train.checkpoint import load_weights
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.scoring import build, evaluate_model, load_split

HERE = Path(__file__).parent


@pytest.mark.parametrize("loss", sorted(STEP_LOSSES))
def test_two_processes_match_one(trained_run, walks, tmp_path, loss):
    """Two processes on loopback: the test metrics (ranked in item ranges there) and one step of
    each loss, the large-catalogue ones included, equal one process's."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        torchrun = shutil.which("torchrun")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        # the helpers beside this file, and the repository for the ``tests`` package they read
        "PYTHONPATH": os.pathsep.join(
            [str(HERE), str(HERE.parents[2]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    command = [
        str(torchrun),
        "--standalone",
        "--nproc_per_node=2",
        str(HERE / "ddp_worker.py"),
        str(trained_run),
        str(walks),
        str(tmp_path),
        loss,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]

    run = load_run(trained_run)
    split = load_split(run.config.data)
    single = evaluate_model(run.model, split.test, split.num_items, run.config.eval)
    assert json.loads((tmp_path / "eval.json").read_text()) == single.metrics

    config = step_config(walks, loss)
    split = load_split(config.data)
    model = build(config, split.num_items)
    loop = TrainingLoop(config, split, model, distributed.Context())
    assert len(loop.examples) > 64  # the global batch spans both shards
    loop.train_step(np.arange(len(loop.examples)), loop.begin_epoch(1))
    reference = build(config, split.num_items)
    load_weights(reference, tmp_path / "step.safetensors")
    initial = build(config, split.num_items).state_dict()
    for key, value in model.state_dict().items():
        assert torch.allclose(reference.state_dict()[key], value, atol=1e-6), key
    moved = [k for k, v in model.state_dict().items() if not torch.equal(v, initial[k])]
    assert moved, "the step changed no parameter"


@pytest.mark.parametrize("rows", [0, 1, 5, 6, 7])
def test_shards_partition_the_rows(rows):
    parts = [distributed.shard(rows, distributed.Context(r, 3)) for r in range(3)]
    assert parts[0].start == 0 and parts[-1].stop == rows
    assert all(a.stop == b.start for a, b in itertools.pairwise(parts))
    assert max(p.stop - p.start for p in parts) - min(p.stop - p.start for p in parts) <= 1
