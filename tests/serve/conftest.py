"""One tiny trained run (2 layers × 2 heads, item titles) and one real server over it per test
session: ``attnsvm serve`` in a subprocess on a free loopback port, spoken to over HTTP."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from serve_helpers import start_server, write_walks

from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig

BATCH_WAIT_MS = 20  # long enough that a burst of concurrent requests shares a forward pass


@pytest.fixture(scope="session")
def served_run(tmp_path_factory) -> Path:
    from attnsvm.rec.train import train

    folder = tmp_path_factory.mktemp("serve_data")
    config = RunConfig(
        model=ModelChoice(
            "sasrec+",
            {"hidden_size": 16, "ffn_size": 16, "num_blocks": 2, "num_heads": 2, "dropout": 0.0},
        ),
        data=DataConfig(dataset=str(write_walks(folder)), max_len=12),
        train=TrainConfig(epochs=6, batch_size=32, lr=1e-2, patience=10, seed=0),
        eval=EvalConfig(ks=(1, 10), batch_size=64),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(config, folder / "run", show_progress=False).run_dir
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def server(served_run) -> str:
    process, url = start_server(served_run, "--batch-wait-ms", str(BATCH_WAIT_MS))
    yield url
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
