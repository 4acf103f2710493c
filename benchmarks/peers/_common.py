"""What every SASRec+ worker of ``benchmarks/sasrec_peers.py`` shares.

Each worker (``attnsvm_sasrec.py``, ``rectools_sasrec.py``, ``replay_sasrec.py``,
``recbole_sasrec.py``) runs under its own library's virtual environment, so this module needs
only the standard library, numpy and pandas, which all four environments have. A worker:

1. reads the common table (``--table``: CSV ``user_id,item_id,position,part``; ids are the
   attnsvm internal ids, ``part`` is ``train``, ``valid`` or ``test``),
2. trains SASRec+ with ``CONFIG`` for ``--epochs`` epochs on the ``train`` rows, timing each
   epoch,
3. ranks the whole catalogue for every user from the train + valid history, timed,
4. writes its ranked lists to ``--out/topk.npz`` (``users``, ``items``: one row per user, best
   first, 0 = no item) and prints one JSON line of results, its last line of output.

The orchestrator scores the lists with attnsvm's metric code, so no worker computes metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import numpy as np

# The common SASRec+ configuration (train_published.py's RUNS["sasrec+"]): full-catalogue
# cross-entropy on every position, Adam(W, weight decay 0) with betas (0.9, 0.98).
CONFIG = {
    "hidden_size": 64,
    "num_blocks": 2,
    "num_heads": 1,
    "ffn_size": 64,
    "dropout": 0.1,
    "lr": 1e-3,
    "betas": (0.9, 0.98),
    "weight_decay": 0.0,
    "batch_size": 128,
    "max_len": 200,
}


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--table", type=Path, required=True, help="the common CSV table")
    parser.add_argument("--out", type=Path, required=True, help="folder for topk.npz and logs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--eval-batch-size", type=int, default=256)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--cap-seconds", type=float, default=300.0, help="RecBole only: training wall clock"
    )
    # attnsvm only: the same data as the table, through attnsvm's own loader
    parser.add_argument("--dataset")
    parser.add_argument("--root")
    parser.add_argument("--variant", choices=("fp32", "bf16", "compile"), default="fp32")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def use_threads(threads: int) -> None:
    """Fix torch's intra-op threads; the orchestrator already set OMP_NUM_THREADS for OpenMP."""
    import torch

    torch.set_num_threads(threads)


def read_table(path: Path):
    """The common table as a pandas frame sorted by (user, position)."""
    import pandas as pd

    frame = pd.read_csv(path, dtype={"user_id": np.int64, "item_id": np.int64})
    return frame.sort_values(["user_id", "position"], kind="stable").reset_index(drop=True)


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def lightning_epoch_timer(callback_base: type) -> type:
    """A Lightning callback class whose ``seconds`` lists each training epoch's wall clock.

    Built on ``callback_base`` because RecTools and RePlay pin different Lightning packages
    (``pytorch_lightning`` and ``lightning``), and this module imports neither.
    """

    class EpochTimer(callback_base):
        def __init__(self) -> None:
            super().__init__()
            self.seconds: list[float] = []
            self._start: float | None = None

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            self._start = time.perf_counter()

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            if self._start is not None:
                self.seconds.append(time.perf_counter() - self._start)
                self._start = None

    return EpochTimer


def ragged_to_matrix(lists: list[list[int]], width: int) -> np.ndarray:
    """Item lists of unequal length as a (rows, width) int64 matrix padded with 0."""
    matrix = np.zeros((len(lists), width), dtype=np.int64)
    for row, items in enumerate(lists):
        items = items[:width]
        matrix[row, : len(items)] = items
    return matrix


def finish(args: argparse.Namespace, users: np.ndarray, items: np.ndarray, result: dict) -> None:
    """Save the ranked lists and print the result line (with peak RSS and threads) last."""
    import torch

    np.savez(args.out / "topk.npz", users=np.asarray(users, np.int64), items=items)
    result = {
        **result,
        "peak_rss_mib": peak_rss_mib(),
        "torch_threads_after": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch_version": torch.__version__,
    }
    print(json.dumps(result), flush=True)
