"""What the data tests that train through the CLI share: a one-block model trained two steps."""

TINY_TRAINING = [
    "--model", "sasrec+",
    "--set", "model.num_blocks=1", "--set", "model.num_heads=1", "--set", "model.hidden_size=8",
    "--set", "model.ffn_size=8", "--set", "data.max_len=6", "--set", "train.epochs=1",
    "--set", "train.steps_per_epoch=2", "--set", "train.batch_size=16", "--set", "eval.ks=[10]",
    "--no-progress",
]  # fmt: skip
