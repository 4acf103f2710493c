"""RecTools 0.19 SASRec+ worker for ``benchmarks/sasrec_peers.py`` (runs in /tmp/venvs/rectools).

``SASRecModel`` with ``loss="softmax"`` (full-catalogue CE on every position) and the common
config. Deviations from RecTools' defaults, each to match the common config:

* ``n_factors=64, n_blocks=2, n_heads=1, dropout_rate=0.1, session_max_len=200`` (defaults 256,
  2, 4, 0.2, 100); the FFN inner size is ``n_factors`` = 64 already; ids only as item features
  (``IdEmbeddingsItemNet``; the default also adds a categorical-feature net).
* ``pos_encoding_kwargs={"use_scale_factor": True}``: item embeddings × √d, as in the SASRec
  paper, attnsvm and RePlay. RecTools' default (False) lets the Xavier-initialised item
  embeddings drown in the positional ones early on and reaches only about a third of the
  HR@10 after 3 epochs (``../shared/research/peers.md`` note 1), which would make RecTools
  look worse than it is.
* Seeded (``seed_everything``) so repeats are comparable; ``deterministic=False`` as in
  RecTools' default. Kept RecTools' defaults: Adam betas (0.9, 0.98), causal mask without a
  key-padding mask, Xavier-normal initialisation.

Timing: epochs by a Lightning callback (read back from ``model.fit_trainer``: RecTools fits a
deep copy of the trainer); evaluation = ``recommend(users=all, dataset=train+valid, k,
filter_viewed=True)``, including RecTools' own dataset conversion.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytorch_lightning as pl
from _common import (
    CONFIG,
    finish,
    lightning_epoch_timer,
    parse_args,
    ragged_to_matrix,
    read_table,
    use_threads,
)
from rectools import Columns
from rectools.dataset import Dataset
from rectools.models import SASRecModel
from rectools.models.nn.item_net import IdEmbeddingsItemNet

EpochTimer = lightning_epoch_timer(pl.Callback)


def rectools_dataset(frame: pd.DataFrame) -> Dataset:
    """Interactions with the position in the user's sequence as the time (seconds since 1970)."""
    table = pd.DataFrame(
        {
            Columns.User: frame["user_id"].to_numpy(),
            Columns.Item: frame["item_id"].to_numpy(),
            Columns.Weight: 1.0,
            Columns.Datetime: pd.to_datetime(frame["position"].to_numpy(), unit="s"),
        }
    )
    return Dataset.construct(table)


def main() -> None:
    args = parse_args(__doc__.split("\n")[0])
    use_threads(args.threads)
    pl.seed_everything(args.seed, workers=True)
    frame = read_table(args.table)
    train_frame = frame[frame["part"] == "train"]
    history_frame = frame[frame["part"] != "test"]  # train + valid: the test-time history

    timer = EpochTimer()
    epochs = args.epochs

    def make_trainer() -> pl.Trainer:
        return pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=epochs,
            min_epochs=epochs,
            deterministic=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
            enable_checkpointing=False,
            callbacks=[timer],
        )

    model = SASRecModel(
        n_factors=CONFIG["hidden_size"],
        n_blocks=CONFIG["num_blocks"],
        n_heads=CONFIG["num_heads"],
        dropout_rate=CONFIG["dropout"],
        session_max_len=CONFIG["max_len"],
        loss="softmax",
        lr=CONFIG["lr"],
        batch_size=CONFIG["batch_size"],
        epochs=epochs,
        recommend_batch_size=args.eval_batch_size,
        item_net_block_types=(IdEmbeddingsItemNet,),
        pos_encoding_kwargs={"use_scale_factor": True},
        get_trainer_func=make_trainer,
    )
    train_dataset = rectools_dataset(train_frame)
    start = time.perf_counter()
    model.fit(train_dataset)
    fit_seconds = time.perf_counter() - start
    fitted_timer = next(c for c in model.fit_trainer.callbacks if isinstance(c, EpochTimer))
    optimizer = model.fit_trainer.optimizers[0]
    adam_betas = optimizer.param_groups[0]["betas"]

    users = np.sort(frame["user_id"].unique())
    start = time.perf_counter()
    history = rectools_dataset(history_frame)
    reco = model.recommend(users=users, dataset=history, k=args.top_k, filter_viewed=True)
    eval_seconds = time.perf_counter() - start

    reco = reco.sort_values([Columns.User, Columns.Rank])
    lists = reco.groupby(Columns.User)[Columns.Item].agg(list)
    items = [lists.get(user, []) for user in users]
    finish(
        args,
        users,
        ragged_to_matrix(items, args.top_k),
        {
            "library": "rectools",
            "version": __import__("rectools").__version__,
            "epoch_seconds": fitted_timer.seconds,
            "fit_seconds": fit_seconds,
            "eval_seconds": eval_seconds,
            "parameters": sum(p.numel() for p in model.lightning_model.torch_model.parameters()),
            "steps": model.fit_trainer.global_step,
            "adam_betas": list(adam_betas),
            "notes": "loss='softmax', pos_encoding_kwargs={'use_scale_factor': True} (not the "
            "RecTools default; see peers.md note 1), IdEmbeddingsItemNet only, seeded",
        },
    )


if __name__ == "__main__":
    main()
