"""Helpers for the trainer tests: a tiny learnable dataset and tiny run configs."""

from __future__ import annotations

from pathlib import Path

from tests.walks import NUM_ITEMS as NUM_ITEMS  # the helpers the trainer tests import here
from tests.walks import write_walks as write_walks

from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.models import LossConfig


def tiny_config(
    data: Path,
    *,
    model: str = "sasrec+",
    epochs: int = 3,
    dropout: float = 0.1,
    loss: LossConfig | None = None,
    seed: int = 0,
) -> RunConfig:
    return RunConfig(
        model=ModelChoice(
            model,
            {
                "hidden_size": 16,
                "ffn_size": 16,
                "num_blocks": 1,
                "dropout": dropout,
                "attention_dropout": dropout,
            },
        ),
        data=DataConfig(dataset=str(data), max_len=12),
        loss=loss,
        train=TrainConfig(epochs=epochs, batch_size=32, lr=1e-2, patience=10, seed=seed),
        eval=EvalConfig(ks=(1, 10), batch_size=64),
    )


#: the losses whose distributed step is checked against one process: per-position negatives,
#: the large-catalogue ones (negatives shared by the step, from the sampler and the batch, with
#: log-q correction) and the full CE in item tiles
STEP_LOSSES = {
    "bce": LossConfig(name="bce", num_negatives=3),
    "mixed": LossConfig(
        name="sampled_softmax", num_negatives=8, negatives="mixed", logq_correction=True
    ),
    "ce_item_chunk": LossConfig(name="ce", ce_item_chunk=7),
}


def step_config(data: Path, loss: str = "bce") -> RunConfig:
    """No dropout (its masks depend on the process count) and sampled negatives (they must not)."""
    return tiny_config(data, model="sasrec", dropout=0.0, loss=STEP_LOSSES[loss])
