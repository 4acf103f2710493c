"""RePlay 0.22 SASRec worker for ``benchmarks/sasrec_peers.py`` (runs in /tmp/venvs/replay).

The new ``replay.nn`` API, as in RePlay's ``examples/09_sasrec_example.ipynb``:
``SasRec.from_params(embedding_dim=64, num_heads=1, num_blocks=2, max_sequence_length=200,
dropout=0.1)`` (defaults 192, 4, 2, 50, 0.3; the FFN hidden size is ``embedding_dim`` = 64),
whose loss is CE over the whole catalogue on every position, with a causal + key-padding mask.
Adam lr 1e-3, betas (0.9, 0.98), weight decay 0 (``OptimizerFactory``, RePlay's defaults, set
explicitly). Data go through ``ParquetModule`` files of per-user sequences: the train file's
metadata shape is 201 (200 inputs + the shifted target; RePlay left-pads and keeps the last
201 items).

Deviations and traps (``../shared/research/peers.md``, deviation A):

* Items are RePlay ids 0..N-1 (the table's id - 1) with padding N, as its embedding expects.
* ``limit_val_batches=0``: there is no validation file, and without it ``trainer.fit`` on a
  ``ParquetModule`` without ``validate_path`` fails with ``KeyError: 'validate'``.
* Seen items are masked by ``SeenItemsFilter(item_count=N)``, which reads a ``seen_ids``
  column holding the whole train + valid history (shape = the longest history, padding -1).
* ``L.seed_everything(seed)``.

Timing: epochs by a Lightning callback; evaluation = ``trainer.predict`` with the top-k
callback and the seen-item filter plus ``get_result`` (the predict file is written before).
"""

from __future__ import annotations

import time

import lightning as L
import numpy as np
from _common import CONFIG, finish, lightning_epoch_timer, parse_args, read_table, use_threads
from replay.data import FeatureHint, FeatureType
from replay.data.nn import ParquetModule, TensorFeatureInfo, TensorSchema
from replay.nn.lightning import LightningModule
from replay.nn.lightning.callback import PandasTopItemsCallback
from replay.nn.lightning.optimizer import OptimizerFactory
from replay.nn.lightning.postprocessor import SeenItemsFilter
from replay.nn.sequential import SasRec
from replay.nn.transform.template import make_default_sasrec_transforms

EpochTimer = lightning_epoch_timer(L.Callback)


def sequences(frame):
    """One row per user: ``user_id`` and the RePlay item ids (table id - 1) in order."""
    items = (frame["item_id"] - 1).groupby(frame["user_id"]).agg(list)
    return items.rename("item_id").reset_index()


def main() -> None:
    args = parse_args(__doc__.split("\n")[0])
    use_threads(args.threads)
    L.seed_everything(args.seed, workers=True)
    frame = read_table(args.table)
    num_items = int(frame["item_id"].max())  # the table's ids are 1..num_items
    max_len = CONFIG["max_len"]

    train_path, predict_path = args.out / "train.parquet", args.out / "predict.parquet"
    sequences(frame[frame["part"] == "train"]).to_parquet(train_path)
    history = sequences(frame[frame["part"] != "test"])
    history["seen_ids"] = history["item_id"]
    history.to_parquet(predict_path)
    longest_history = int(history["item_id"].map(len).max())

    schema = TensorSchema(
        [
            TensorFeatureInfo(
                name="item_id",
                is_seq=True,
                padding_value=num_items,
                cardinality=num_items,
                embedding_dim=CONFIG["hidden_size"],
                feature_type=FeatureType.CATEGORICAL,
                feature_hint=FeatureHint.ITEM_ID,
            )
        ]
    )
    transforms = make_default_sasrec_transforms(schema)
    train_module = ParquetModule(
        batch_size=CONFIG["batch_size"],
        transforms=transforms,
        metadata={"train": {"item_id": {"shape": max_len + 1, "padding": num_items}}},
        train_path=str(train_path),
    )
    network = SasRec.from_params(
        schema=schema,
        embedding_dim=CONFIG["hidden_size"],
        num_heads=CONFIG["num_heads"],
        num_blocks=CONFIG["num_blocks"],
        max_sequence_length=max_len,
        dropout=CONFIG["dropout"],
        hidden_dim=CONFIG["ffn_size"],
    )
    module = LightningModule(
        network,
        optimizer_factory=OptimizerFactory(
            optimizer="adam",
            learning_rate=CONFIG["lr"],
            weight_decay=CONFIG["weight_decay"],
            betas=CONFIG["betas"],
        ),
    )
    timer = EpochTimer()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=args.epochs,
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        callbacks=[timer],
    )
    start = time.perf_counter()
    trainer.fit(module, datamodule=train_module)
    fit_seconds = time.perf_counter() - start

    predict_module = ParquetModule(
        batch_size=args.eval_batch_size,
        transforms=transforms,
        metadata={
            "predict": {
                "user_id": {},
                "item_id": {"shape": max_len, "padding": num_items},
                "seen_ids": {"shape": longest_history, "padding": -1},
            }
        },
        predict_path=str(predict_path),
    )
    top_items = PandasTopItemsCallback(
        top_k=args.top_k,
        query_column="user_id",
        item_column="item_id",
        rating_column="score",
        postprocessors=[SeenItemsFilter(item_count=num_items)],
    )
    predictor = L.Trainer(
        accelerator="cpu",
        devices=1,
        callbacks=[top_items],
        inference_mode=True,
        enable_progress_bar=False,
        logger=False,
    )
    start = time.perf_counter()
    predictor.predict(module, datamodule=predict_module, return_predictions=False)
    reco = top_items.get_result()
    eval_seconds = time.perf_counter() - start

    # back to the table's ids; the exploded frame keeps each user's rows in rank order
    reco["item_id"] = reco["item_id"].astype(np.int64) + 1
    lists = reco.groupby("user_id", sort=True)["item_id"].agg(list)
    finish(
        args,
        lists.index.to_numpy(),
        np.array(lists.tolist(), dtype=np.int64),
        {
            "library": "replay",
            "version": __import__("replay").__version__,
            "epoch_seconds": timer.seconds,
            "fit_seconds": fit_seconds,
            "eval_seconds": eval_seconds,
            "parameters": sum(p.numel() for p in network.parameters()),
            "steps": trainer.global_step,
            "adam_betas": list(trainer.optimizers[0].param_groups[0]["betas"]),
            "notes": "replay.nn SasRec (CE), SeenItemsFilter with a seen_ids column, "
            "limit_val_batches=0, seeded",
        },
    )


if __name__ == "__main__":
    main()
