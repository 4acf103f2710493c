"""The demo run: a small SASRec+ that learns the built-in planted trigger → target data.

``attnsvm demo`` trains it (``demo_train``), then the lens reads the run and checks whether the
attention selects the planted trigger.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.train.checkpoint import RunDirectory
from attnsvm.rec.train.trainer import train


def demo_config() -> RunConfig:
    """A small SASRec+ that learns the built-in planted trigger → target data in about a minute.

    The planted data's validation item (second-to-last) is background noise while its test item
    is planted, so validation NDCG says nothing about the planted structure: the demo trains a
    fixed budget and keeps the last weights (``keep="last"``). No dropout: the data are clean.
    One attention layer — the paper's setting, and it learns the planted selection faster than
    two (test HR@10 0.38 vs 0.32 after 40 epochs; popularity scores 0).
    """
    return RunConfig(
        model=ModelChoice(
            "sasrec+",
            {
                "hidden_size": 64,
                "ffn_size": 64,
                "num_blocks": 1,
                "dropout": 0.0,
                "attention_dropout": 0.0,
            },
        ),
        data=DataConfig(dataset="synthetic", max_len=20),
        train=TrainConfig(epochs=40, batch_size=32, lr=3e-3, keep="last", seed=0),
        eval=EvalConfig(ks=(1, 5, 10, 20)),
    )


def demo_train(out_dir: str | Path, *, show_progress: bool = True) -> tuple[Path, dict[str, float]]:
    """Train the demo model into ``out_dir/demo-sasrec`` and return ``(run_dir, test metrics)``.

    A previous demo run there (finished or interrupted) is replaced, so the demo can be re-run.
    """
    run = RunDirectory(Path(out_dir) / "demo-sasrec")
    for path in (run.final, run.partial):
        if path.is_dir():
            shutil.rmtree(path)
    result = train(demo_config(), run.final, show_progress=show_progress)
    return result.run_dir, result.test
