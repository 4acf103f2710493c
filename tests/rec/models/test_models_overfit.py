"""Each model and loss memorises a tiny dataset: training loss → ~0 and HR@1 → 1.

20 sequences of 8 distinct items from a catalogue of 30, with distinct first items, so every
prefix has one continuation and a perfect model exists for the all-position (causal) targets.
"""

import pytest
import torch

from attnsvm.rec.models import LossConfig, SequentialRecommender, build_model

NUM_ITEMS, USERS, LENGTH = 30, 20, 8
TINY = {"hidden_size": 32, "ffn_size": 32, "num_heads": 2, "max_len": LENGTH, "dropout": 0.0}
TINY |= {"attention_dropout": 0.0}


def tiny_dataset() -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    firsts = torch.randperm(NUM_ITEMS, generator=generator)[:USERS] + 1
    rows = []
    for first in firsts:
        rest = torch.randperm(NUM_ITEMS, generator=generator) + 1
        rows.append(torch.cat([first[None], rest[rest != first][: LENGTH - 1]]))
    return torch.stack(rows)


def causal_loss(net: SequentialRecommender, data: torch.Tensor, loss: LossConfig, generator):
    inputs, targets = data[:, :-1], data[:, 1:]
    valid = targets != 0
    hidden = net(inputs)[valid]
    negatives = torch.randint(
        1, NUM_ITEMS + 1, (len(hidden), loss.num_negatives), generator=generator
    )
    return loss.compute(
        hidden, targets[valid], net.output_embedding(), net.output_bias(), negatives
    )


def cloze_loss(net: SequentialRecommender, data: torch.Tensor, loss: LossConfig, generator):
    inputs, targets = net.mask_items(data, generator)
    valid = targets != 0
    hidden = net(inputs)[valid]
    return loss.compute(hidden, targets[valid], net.output_embedding(), net.output_bias())


def hit_rate_at_1(net: SequentialRecommender, data: torch.Tensor) -> float:
    with torch.no_grad():
        best = net.score_last(data[:, :-1]).argmax(dim=1)
    return (best == data[:, -1]).float().mean().item()


@pytest.mark.parametrize(
    ("name", "loss", "steps", "lr"),
    [
        ("sasrec+", LossConfig(name="ce", ce_chunk_size=37), 200, 1e-2),
        ("sasrec", LossConfig(name="bce", num_negatives=1), 500, 3e-3),
        ("sasrec", LossConfig(name="sampled_softmax", num_negatives=8), 400, 3e-3),
        # at lr 1e-2 gBCE collapses to one hidden state scoring every item alike
        ("gsasrec", LossConfig(name="gbce", num_negatives=8, gbce_t=0.75), 500, 3e-3),
        ("bert4rec", LossConfig(name="ce"), 300, 1e-2),
        # the official SASRec-style BCE sum; their auxiliary terms: tests/rec/zoo/test_zoo_staged
        ("adt", LossConfig(name="bce", num_negatives=1, scale=2.0), 500, 3e-3),
        ("bicat", LossConfig(name="bce", num_negatives=1, scale=2.0), 500, 3e-3),
    ],
)
def test_model_overfits_a_tiny_dataset(name: str, loss: LossConfig, steps: int, lr: float) -> None:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    overrides = dict(TINY)
    if name == "bert4rec":
        # half the sequences train the inference situation (only the last item masked)
        overrides |= {"force_last_mask_prob": 0.5, "mask_prob": 0.15}
    net = build_model(name, NUM_ITEMS, **overrides)
    data = tiny_dataset()
    objective = cloze_loss if net.objective == "cloze" else causal_loss
    optimiser = torch.optim.Adam(net.parameters(), lr=lr)
    net.train()
    for _ in range(steps):
        optimiser.zero_grad()
        objective(net, data, loss, generator).backward()
        optimiser.step()
    net.eval()
    with torch.no_grad():
        if net.objective == "cloze":  # the deterministic cloze case: only the last item masked
            last = torch.cat([data[:, :-1], torch.full((USERS, 1), net.mask_token)], 1)
            final = loss.compute(
                net(last)[:, -1], data[:, -1], net.output_embedding(), net.output_bias()
            )
        else:
            final = causal_loss(net, data, loss, generator)
    # the property is memorisation (every next item ranked first); the loss bound only says it
    # is far below chance (log 30 ≈ 3.4) and leaves headroom for another CPU's float path
    # (BERT4Rec ends at 0.0551 with AVX-512 kernels and below 0.05 with AVX2)
    assert hit_rate_at_1(net, data) == 1.0
    assert final.item() < 0.5
