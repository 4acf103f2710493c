"""A tiny learnable dataset (each user walks the catalogue in steps of 3) and tiny run configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_helpers import tiny_config, write_walks


@pytest.fixture(scope="session")
def walks(tmp_path_factory) -> Path:
    return write_walks(tmp_path_factory.mktemp("data") / "walks.txt")


@pytest.fixture(scope="session")
def trained_run(walks, tmp_path_factory) -> Path:
    """One finished SASRec+ run shared by the read-only tests."""
    from attnsvm.rec.train import train

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("runs") / "sasrec"
    return train(tiny_config(walks, epochs=6), out, show_progress=False).run_dir
