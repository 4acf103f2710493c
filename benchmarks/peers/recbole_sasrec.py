"""RecBole 1.2.1 SASRec worker for ``benchmarks/sasrec_peers.py`` (runs in /tmp/venvs/recbole).

RecBole's ``SASRec`` with ``loss_type="CE"`` (full-catalogue softmax) and the common config:
``n_layers=2, n_heads=1, hidden_size=64, inner_size=64, hidden_dropout_prob=0.1,
attn_dropout_prob=0.1, hidden_act="relu", MAX_ITEM_LIST_LENGTH=200``, Adam lr 1e-3, batch 128
(RecBole's defaults: 2, 2, 64, 256, 0.5, 0.5, gelu, 50). The table's positions are the
timestamps; RecBole makes its own ``LS: valid_and_test`` split with ``order: TO``, the same split
as the table's because positions are unique within a user.

Deviations that cannot be removed (``../shared/research/peers.md``, deviation C):

* **An "epoch" is every prefix of every train sequence** (``SequentialDataset.data_augmentation``
  always runs), each right-padded to 200 and trained on its last position only: 981,491 samples
  on ML-1M, about 57 min per epoch on the 2-core machine. So training is capped at
  ``--cap-seconds`` of wall clock: each epoch runs RecBole's own ``Trainer._train_epoch`` on a
  loader wrapper that ends the epoch early once the cap is spent. s/batch is the mean over the
  batches after warm-up, and s/epoch is projected as s/batch × batches per epoch (an epoch that
  finished within the cap, as on the dry data, is timed directly instead).
* Adam betas are torch's default (0.9, 0.999); normal(0, 0.02) initialisation, LayerNorm eps
  1e-12 and no √d scaling.
* No seen-item filter for sequential full ranking: the worker ranks by ``full_sort_predict``,
  takes the top (10 + the longest train + valid history in the batch) and leaves dropping the
  seen items to the orchestrator, so the lists are scored under the common protocol.

RecBole writes ``log/`` and ``saved/`` into the working directory; the orchestrator runs it in
its own folder. Needs ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (set by the orchestrator).
"""

from __future__ import annotations

import json
import logging
import statistics
import time

import numpy as np
import torch
from _common import CONFIG, finish, parse_args, read_table, use_threads
from recbole.config import Config
from recbole.data import create_dataset, data_preparation
from recbole.model.sequential_recommender import SASRec
from recbole.trainer import Trainer
from recbole.utils import init_seed

WARMUP_BATCHES = 20  # s/batch excludes these (first-touch allocations, thread start-up), as
# peers.md did; every batch's seconds go to batch_seconds.json


class CappedLoader:
    """Iterates a RecBole train loader until it ends or the shared wall-clock budget is spent,
    recording how long each batch took (from one batch request to the next)."""

    def __init__(self, loader, deadline: float) -> None:
        self.loader = loader
        self.deadline = deadline
        self.batch_seconds: list[float] = []
        self.samples = 0
        self.completed = False  # the whole epoch ran

    def __iter__(self):
        last = time.perf_counter()
        for batch in self.loader:
            self.samples += len(batch)
            yield batch  # RecBole takes its optimiser step on this batch before asking again
            now = time.perf_counter()
            self.batch_seconds.append(now - last)
            last = now
            if now >= self.deadline:
                return
        self.completed = True


def write_atomic_file(frame, folder) -> None:
    """RecBole's input: a typed TSV ``bench/bench.inter`` with the position as the timestamp."""
    folder.mkdir(parents=True, exist_ok=True)
    table = frame[["user_id", "item_id", "position"]].rename(
        columns={
            "user_id": "user_id:token",
            "item_id": "item_id:token",
            "position": "timestamp:float",
        }
    )
    table.to_csv(folder / "bench.inter", sep="\t", index=False)


def main() -> None:
    args = parse_args(__doc__.split("\n")[0])
    use_threads(args.threads)
    logging.disable(logging.CRITICAL)
    frame = read_table(args.table)
    write_atomic_file(frame, args.out / "dataset" / "bench")
    seen_per_user = frame[frame["part"] != "test"].groupby("user_id").size()

    config = Config(
        model="SASRec",
        dataset="bench",
        config_dict={
            "data_path": str(args.out / "dataset"),
            "checkpoint_dir": str(args.out / "saved"),
            "USER_ID_FIELD": "user_id",
            "ITEM_ID_FIELD": "item_id",
            "TIME_FIELD": "timestamp",
            "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
            "MAX_ITEM_LIST_LENGTH": CONFIG["max_len"],
            "n_layers": CONFIG["num_blocks"],
            "n_heads": CONFIG["num_heads"],
            "hidden_size": CONFIG["hidden_size"],
            "inner_size": CONFIG["ffn_size"],
            "hidden_dropout_prob": CONFIG["dropout"],
            "attn_dropout_prob": CONFIG["dropout"],
            "hidden_act": "relu",
            "loss_type": "CE",
            "train_neg_sample_args": None,  # CE needs negative sampling off
            "learner": "adam",
            "learning_rate": CONFIG["lr"],
            "weight_decay": CONFIG["weight_decay"],
            "train_batch_size": CONFIG["batch_size"],
            "eval_batch_size": args.eval_batch_size,
            "epochs": args.epochs,
            "eval_args": {
                "split": {"LS": "valid_and_test"},
                "order": "TO",
                "group_by": "user",
                "mode": "full",
            },
            "device": "cpu",
            "use_gpu": False,
            "show_progress": False,
            "save_dataset": False,
            "save_dataloaders": False,
            "seed": args.seed,
            "reproducibility": True,
        },
    )
    init_seed(config["seed"], config["reproducibility"])
    torch.set_num_threads(args.threads)  # init_seed leaves threads alone; set again to be sure
    start = time.perf_counter()
    dataset = create_dataset(config)
    train_data, _, test_data = data_preparation(config, dataset)
    prepare_seconds = time.perf_counter() - start
    model = SASRec(config, train_data.dataset)
    trainer = Trainer(config, model)

    # Train: RecBole's own epoch routine, on the capped loader, until the epochs or the cap end.
    deadline = time.perf_counter() + args.cap_seconds
    loaders: list[CappedLoader] = []
    train_start = time.perf_counter()
    for epoch in range(args.epochs):
        loader = CappedLoader(train_data, deadline)
        trainer._train_epoch(loader, epoch)  # the body of Trainer.fit, without validation
        loaders.append(loader)
        if not loader.completed:
            break
    train_seconds = time.perf_counter() - train_start
    batch_seconds = [s for loader in loaders for s in loader.batch_seconds]
    # a short (dry) run keeps at least half of its batches
    timed = batch_seconds[min(WARMUP_BATCHES, len(batch_seconds) // 2) :]
    seconds_per_batch = statistics.mean(timed)
    (args.out / "batch_seconds.json").write_text(json.dumps(batch_seconds))
    batches_per_epoch = len(train_data)
    completed = [sum(loader.batch_seconds) for loader in loaders if loader.completed]

    # Rank: the test loader's histories are train + valid (last 200 items).
    model.eval()
    start = time.perf_counter()
    users, lists = [], []
    with torch.no_grad():
        for interaction, _, _, _ in test_data:
            scores = model.full_sort_predict(interaction)
            scores[:, 0] = -torch.inf  # RecBole's padding item
            tokens = dataset.id2token("user_id", interaction["user_id"].numpy())
            batch_users = tokens.astype(np.int64)
            longest_seen = int(seen_per_user.loc[batch_users].max())
            k = min(args.top_k + longest_seen, scores.shape[1] - 1)
            top = torch.topk(scores, k, dim=1).indices.numpy()
            users.append(batch_users)
            lists.append(dataset.id2token("item_id", top).astype(np.int64))
    eval_seconds = time.perf_counter() - start

    width = max(block.shape[1] for block in lists)
    items = np.zeros((sum(len(block) for block in lists), width), dtype=np.int64)
    row = 0
    for block in lists:
        items[row : row + len(block), : block.shape[1]] = block
        row += len(block)
    result = {
        "library": "recbole",
        "version": __import__("recbole").__version__,
        "epoch_seconds": completed,
        "seconds_per_batch": seconds_per_batch,
        "median_seconds_per_batch": statistics.median(timed),
        "timed_batches": len(timed),
        "batches_per_epoch": batches_per_epoch,
        "batch_size": CONFIG["batch_size"],
        "trained_batches": len(batch_seconds),
        "trained_samples": sum(loader.samples for loader in loaders),
        "train_seconds": train_seconds,
        "cap_seconds": args.cap_seconds,
        "capped": len(completed) < args.epochs,
        "prepare_seconds": prepare_seconds,
        "eval_seconds": eval_seconds,
        "parameters": sum(p.numel() for p in model.parameters()),
        "adam_betas": list(trainer.optimizer.param_groups[0]["betas"]),
        "notes": "epoch = every prefix; seen items dropped by the orchestrator",
    }
    if result["capped"]:
        result["projected_epoch_seconds"] = seconds_per_batch * batches_per_epoch
        result["notes"] += (
            "; training capped at cap_seconds, s/epoch projected from s/batch; metrics after "
            "the cap (about equal wall clock, not equal epochs)"
        )
    finish(args, np.concatenate(users), items, result)


if __name__ == "__main__":
    main()
