"""Tiny data and a minimal training loop shared by the zoo tests."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from attnsvm.rec.data.batches import make_batch, make_examples
from attnsvm.rec.data.sequences import Sequences
from attnsvm.rec.models import build_model
from attnsvm.rec.nn.losses import full_ce_loss

NUM_ITEMS = 30
MAX_LEN = 8
SMALL = {
    "hidden_size": 32,
    "ffn_size": 32,
    "num_heads": 2,
    "max_len": MAX_LEN,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}
MODEL_OVERRIDES = {
    "bsarec": {},
    "ssept": {"num_users": 20, "user_size": 8, "user_sse": 0.0, "item_sse": 0.0},
    "actsr": {"num_blocks": 2},
    "convformer": {"kernel_size": 6},
    "adamct": {"se_ratio": 2},
    "matrrec": {"state_size": 8},
    "strec": {"num_blocks": 2, "time_scale": 3600.0},
}
ZOO = tuple(MODEL_OVERRIDES)


@contextlib.contextmanager
def one_thread():
    """Tiny tensors: one intra-op thread is faster, and the CI cores are shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def make_model(name: str, seed: int = 0, **overrides) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(name, NUM_ITEMS, **{**SMALL, **MODEL_OVERRIDES[name], **overrides})


def tiny_sequences(rows: int = 12, length: int = MAX_LEN + 1, seed: int = 0) -> Sequences:
    rng = np.random.default_rng(seed)
    return Sequences.from_lists(
        [
            rng.choice(np.arange(1, NUM_ITEMS + 1), size=length, replace=False).tolist()
            for _ in range(rows)
        ]
    )


def times_for(item_seq: torch.Tensor) -> torch.Tensor:
    """Event times one hour apart with a user-specific rhythm (STRec and SDAT read them)."""
    steps = torch.arange(item_seq.shape[1], dtype=torch.float64)
    return (steps[None, :] * (1 + item_seq[:, :1] % 3) * 3600.0).to(torch.get_default_dtype())


def run(model, item_seq: torch.Tensor, users: torch.Tensor | None = None, **kwargs):
    """``model(item_seq)`` with the extra inputs the model needs (users, timestamps)."""
    name = type(model).__name__
    if name == "SSEPT":
        return model(item_seq, users=users, **kwargs)
    if "timestamps" in model.extra_inputs:  # STRec, SDAT
        return model(item_seq, times_for(item_seq).to(item_seq.device), **kwargs)
    return model(item_seq, **kwargs)


def overfit(model, train: Sequences, steps: int = 40, lr: float = 1e-2) -> float:
    """Full-batch CE on the model's objective; returns HR@1 of each row's last item."""
    examples = make_examples(train, model.objective)
    index = np.arange(len(examples))
    batch = make_batch(train, examples, index, model.objective, MAX_LEN)
    users = torch.from_numpy(train.users[examples.rows])
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        hidden = run(model, batch.inputs, users)
        if model.objective == "causal":
            mask = batch.targets != 0
            hidden, positives = hidden[mask], batch.targets[mask]
        else:
            hidden, positives = hidden[:, -1], batch.targets
        loss = full_ce_loss(hidden, positives, model.output_embedding(), model.output_bias())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    inputs = torch.from_numpy(train.padded(MAX_LEN + 1)[:, :-1])
    targets = torch.from_numpy(train.padded(MAX_LEN + 1)[:, -1])
    with torch.no_grad():
        scores = model.logits(run(model, inputs, torch.from_numpy(train.users))[:, -1])
    return float((scores.argmax(1) == targets).double().mean())
