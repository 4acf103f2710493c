"""SMM (Transformer-SMM): the masked-last windows over every session prefix, CoPE against
hand-computed positions and logits, and memorising tiny sessions through the trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rich.progress import Progress

from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.data.batches import make_batch, make_examples
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.sequences import Sequences
from attnsvm.rec.data.splits import predefined_split
from attnsvm.rec.models import build_model
from attnsvm.rec.nn.attention import MultiHeadAttention, attention_mask
from attnsvm.rec.nn.cope import ContextualPositions, CoPEAttention
from attnsvm.rec.train import distributed
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.scoring import build, evaluate_model

TINY = {"hidden_size": 16, "ffn_size": 16, "num_blocks": 1, "dropout": 0.0}
TINY |= {"attention_dropout": 0.0}


def _walks(sessions: int, seed: int, items: int = 30) -> Interactions:
    """Sessions of 3-8 items, each the previous + 3 (mod items): one continuation per item."""
    rng = np.random.default_rng(seed)
    ids, clicks = [], []
    for session in range(1, sessions + 1):
        start = rng.integers(items)
        for step in range(rng.integers(3, 9)):
            ids.append(session)
            clicks.append((start + 3 * step) % items + 1)
    return Interactions.from_columns(np.array(ids), np.array(clicks))


def _config(max_len: int = 8, **model) -> RunConfig:
    return RunConfig(
        model=ModelChoice("smm", TINY | model),
        data=DataConfig(dataset="walks", split="predefined", root="unused", max_len=max_len),
        train=TrainConfig(epochs=40, batch_size=32, lr=1e-2, seed=0),
        eval=EvalConfig(ks=(1, 10)),
    )


# -- windows and targets --------------------------------------------------------------------


def test_every_prefix_is_a_window_ending_in_the_mask_with_its_next_item_as_target() -> None:
    train = Sequences.from_lists([[5, 6, 7, 8], [9, 5]])
    examples = make_examples(train, "last")
    batch = make_batch(train, examples, np.arange(len(examples)), "last", max_len=4)
    assert batch.targets.tolist() == [6, 7, 8, 5]
    model = build_model("smm", 10, **TINY, max_len=4)
    mask = model.mask_token
    # the window keeps the last max_len - 1 items of the prefix; the mask token follows
    assert model.scoring_input(batch.inputs).tolist() == [
        [0, 0, 5, mask],
        [0, 5, 6, mask],
        [5, 6, 7, mask],
        [0, 0, 9, mask],
    ]
    # the trainer trains on exactly that window (its "last" objective reads scoring_input)
    split = predefined_split(_walks(20, 0), _walks(4, 1), 0.2)
    loop = TrainingLoop(
        _config(max_len=4), split, build(_config(max_len=4), split.num_items), distributed.Context()
    )
    step = loop._prepare(
        make_batch(loop.train_rows, loop.examples, np.arange(8), "last", 4),
        torch.Generator().manual_seed(0),
    )
    assert torch.all(step.inputs[:, -1] == loop.model.mask_token)
    assert step.inputs.shape == (8, 4)


def test_sep_follows_the_mask_inside_forward_and_is_not_returned() -> None:
    model = build_model("smm", 10, **TINY, max_len=5, sep=True).eval()
    window = model.scoring_input(torch.tensor([[1, 2, 3, 4, 5]]))
    assert window.tolist() == [[3, 4, 5, model.mask_token]]  # room for [SEP] in max_len
    assert model(window).shape == (1, 4, 16)
    with torch.no_grad():
        scores = model.score_last(torch.tensor([[1, 2, 3, 4, 5]]))
        hidden = model(window)[:, -1]
    torch.testing.assert_close(scores[:, 1:], model.logits(hidden)[:, 1:])


@pytest.mark.parametrize("options", [{}, {"cope": True}, {"sep": True, "cope": True}])
def test_scores_do_not_depend_on_left_padding(options: dict) -> None:
    """``padding_free``: every real position's output, not only the scored one, ignores it."""
    model = build_model("smm", 12, **TINY, max_len=8, **options).double().eval()
    assert model.padding_free
    short, padded = torch.tensor([[3, 4, 5]]), torch.tensor([[0, 0, 0, 3, 4, 5]])
    with torch.no_grad():
        scores = model.score_last(short), model.score_last(padded)
        hidden = model(model.scoring_input(short)), model(model.scoring_input(padded))
    torch.testing.assert_close(scores[0][:, 1:], scores[1][:, 1:], atol=1e-10, rtol=0)
    torch.testing.assert_close(hidden[0], hidden[1][:, -4:], atol=1e-10, rtol=0)


def test_a_window_too_small_for_its_tokens_is_refused() -> None:
    with pytest.raises(ValueError, match="max_len must be ≥ 3"):
        build_model("smm", 10, max_len=2, sep=True)


# -- CoPE ---------------------------------------------------------------------------------


def test_cope_positions_count_the_gates_from_each_key_to_the_end() -> None:
    cope = ContextualPositions(head_dim=1, max_positions=8)
    # gates σ(0) = 1/2 and σ(log 3) = 3/4; query 0 sees keys 0..3, query 1 keys 0..1 (masked)
    logits = torch.tensor([[[[0.0, np.log(3), 0.0, np.log(3)], [np.log(3), 0.0, 5.0, 5.0]]]])
    keep = torch.tensor([[[[True, True, True, True], [True, True, False, False]]]])
    positions = cope.positions(logits.float(), keep)
    expected = [[0.5 + 0.75 + 0.5 + 0.75, 0.75 + 0.5 + 0.75, 0.5 + 0.75, 0.75], [1.25, 0.5, 0, 0]]
    torch.testing.assert_close(positions[0, 0], torch.tensor(expected))
    # under a causal mask this is the paper's p_ij = Σ_{m=j}^{i} g_im
    causal = attention_mask(torch.ones(1, 3, dtype=torch.bool), causal=True)
    positions = cope.positions(torch.zeros(1, 1, 3, 3), causal)
    torch.testing.assert_close(positions[0, 0, 2], torch.tensor([1.5, 1.0, 0.5]))
    torch.testing.assert_close(positions[0, 0, 1], torch.tensor([1.0, 0.5, 0.0]))


def test_cope_interpolates_the_position_logits_between_integers() -> None:
    cope = ContextualPositions(head_dim=1, max_positions=4)
    with torch.no_grad():
        cope.embedding.copy_(torch.tensor([[0.0, 10.0, 40.0, 90.0]]))
    query = torch.full((1, 1, 1, 1), 2.0)
    logits = torch.zeros(1, 1, 1, 3)  # gates 1/2: positions 1.5, 1.0, 0.5
    term = cope(query, logits, torch.ones(1, 1, 1, 3, dtype=torch.bool))
    # q·e(1.5) = 2·(10 + 40)/2, q·e(1) = 2·10, q·e(0.5) = 2·(0 + 10)/2
    torch.testing.assert_close(term[0, 0, 0], torch.tensor([50.0, 20.0, 10.0]))
    big = cope(query, torch.full((1, 1, 1, 3), 20.0), torch.ones(1, 1, 1, 3, dtype=torch.bool))
    assert big[0, 0, 0, 0].item() == pytest.approx(2 * 90.0)  # 3 gates of ~1 clamp to position 3


def test_cope_attention_starts_as_plain_attention_and_learns_its_positions() -> None:
    torch.manual_seed(0)
    plain = MultiHeadAttention(8, 2)
    cope = CoPEAttention(8, 2, 0.0, max_positions=6)
    cope.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(2, 5, 8)
    keep = attention_mask(torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]]).bool(), causal=False)
    torch.testing.assert_close(cope(x, x, keep), plain(x, x, keep))
    cope(x, x, keep).pow(2).sum().backward()
    assert cope.cope.embedding.grad.abs().sum() > 0


# -- training -----------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"cope": True}])
def test_smm_memorises_tiny_sessions_through_the_trainer(options: dict) -> None:
    torch.set_num_threads(1)
    split = predefined_split(_walks(60, 0), _walks(20, 1), 0.2)
    config = _config(**options)
    model = build(config, split.num_items)
    loop = TrainingLoop(config, split, model, distributed.Context())
    with Progress(disable=True) as progress:
        records = [loop.run_epoch(progress) for _ in range(40)]
    assert records[-1]["train_loss"] < 0.1 * records[0]["train_loss"]
    test = evaluate_model(model, split.test, split.num_items, config.eval).metrics
    assert test["HR@1"] > 0.9
