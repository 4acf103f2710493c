"""Run under ``torchrun`` by test_train_distributed.py: evaluate a checkpoint, take one step.

    torchrun --nproc_per_node=N ddp_worker.py RUN_DIR DATA OUT LOSS

Writes (rank 0) ``OUT/eval.json``: test metrics of RUN_DIR's checkpoint, ranked in shards and,
as a large catalogue is, in ranges of items (a few items wide here), and ``OUT/step.safetensors``:
the weights after one optimiser step with ``train_helpers.STEP_LOSSES[LOSS]`` on the first
global batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from train_helpers import step_config

from attnsvm.process import exit_without_teardown
from attnsvm.rec.eval import ranking
from attnsvm.rec.train import distributed, load_run
from attnsvm.rec.train.checkpoint import save_weights
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.scoring import build, evaluate_model, load_split


def main() -> None:
    run_dir, data, out, loss = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(1)
    # every block is ranked in ranges of 8 items, merged into the running top-k
    ranking.SCORE_WHOLE_ELEMENTS, ranking.SCORE_RANGE_ELEMENTS, ranking.SCORE_RANGE_ALIGN = 0, 8, 8
    context = distributed.init_from_env()
    run = load_run(run_dir)
    split = load_split(run.config.data)
    result = evaluate_model(
        run.model, split.test, split.num_items, run.config.eval, context=context
    )
    config = step_config(data, loss)
    split = load_split(config.data)
    model = build(config, split.num_items)
    loop = TrainingLoop(config, split, model, context)
    distributed.broadcast_parameters(model, context)
    loop.train_step(np.arange(len(loop.examples)), loop.begin_epoch(1))
    if context.is_main:
        (out / "eval.json").write_text(json.dumps(result.metrics))
        save_weights(model, out / "step.safetensors")
    # as the trainer does: no rank tears its group down while rank 0 still writes
    distributed.barrier(context)
    distributed.shutdown(context)
    exit_without_teardown(0)  # as the CLI does under torchrun (a gloo abort, seen twice)


if __name__ == "__main__":
    main()
