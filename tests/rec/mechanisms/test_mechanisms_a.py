"""Each model's key mechanism is what its output or its training signal is made of.

Not the parts in isolation (``tests/rec/nn``, ``tests/rec/zoo``) but the model using them: its
output equals the mechanism written out by hand from the model's own weights, reads exactly the
positions the mechanism says, changes as the paper says when the mechanism's input changes, or
the trainer's step is the one the mechanism prescribes. Tiny models in float64, so equalities
hold to 1e-10 on any CPU and differences are orders of magnitude above rounding.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.models import build_model
from attnsvm.rec.nn.attention import attention_mask
from attnsvm.rec.nn.losses import LossConfig
from attnsvm.rec.train import distributed
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.scoring import build, load_split

NUM_ITEMS = 20
LENGTH = 8
TINY = {
    "hidden_size": 16,
    "ffn_size": 16,
    "num_heads": 2,
    "max_len": LENGTH,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}
EXACT = {"atol": 1e-10, "rtol": 0.0}


def built(name: str, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(name, NUM_ITEMS, **{**TINY, **overrides}).double().eval()


def full_windows(rows: int, length: int, seed: int) -> torch.Tensor:
    """Random item windows without padding: every position holds an item to change."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, NUM_ITEMS + 1, (rows, length), generator=generator)


def windows(length: int = LENGTH) -> torch.Tensor:
    """Three random item windows; row 1 left-padded, so padding is exercised too."""
    seq = full_windows(3, length, seed=0)
    seq[1, :2] = 0
    return seq


def another_item(seq: torch.Tensor, position: int) -> torch.Tensor:
    """``seq`` with every row's item at ``position`` replaced by a different real item."""
    changed = seq.clone()
    changed[:, position] = seq[:, position] % NUM_ITEMS + 1
    return changed


def dependency(forward, seq: torch.Tensor) -> torch.Tensor:
    """``(L, L)`` bool: [t, j] iff the output at position t moves (> 1e-9) when the item at j
    changes, in every row; an output that stays within 1e-12 counts as not moving, and anything
    in between fails (neither clearly read nor clearly unread)."""
    base = forward(seq)
    length = seq.shape[1]
    reads = torch.zeros(length, length, dtype=torch.bool)
    for j in range(length):
        moved = (forward(another_item(seq, j)) - base).abs().amax(dim=-1)  # (B, L)
        assert torch.all((moved < 1e-12) | (moved > 1e-9)), f"item {j}: {moved}"
        assert torch.all((moved > 1e-9).all(0) == (moved > 1e-9).any(0)), f"item {j}: {moved}"
        reads[:, j] = (moved > 1e-9).all(0)
    return reads


def band(length: int, reach: int) -> torch.Tensor:
    """[t, j] iff ``t − reach < j ≤ t``."""
    t, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return (j <= t) & (j > t - reach)


def layer_norm(x: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def masked_softmax(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)


# -- the trainer's real step on a tiny interactions file -------------------------------------


def write_events(path, num_items: int, rows: int, length: int, seed: int = 0, skew: float = 0.0):
    """``user i1 i2 …`` lines; with ``skew`` > 0 items are drawn ∝ rank^−skew (a popularity
    that log-q can correct), and every item appears once so the catalogue is all of them."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, num_items + 1, dtype=np.float64) ** -skew
    lines = [" ".join(map(str, [9999, *range(1, num_items + 1)]))]
    for user in range(rows):
        items = rng.choice(np.arange(1, num_items + 1), size=length, p=weights / weights.sum())
        lines.append(" ".join(map(str, [user, *items])))
    path.write_text("\n".join(lines) + "\n")
    return path


def training_loop(data, model: str, overrides: dict | None = None, **train) -> TrainingLoop:
    """The trainer's loop for a float64 model, no dropout, no clipping, one length group (so
    one loss call per step)."""
    config = RunConfig(
        model=ModelChoice(
            model,
            {
                "hidden_size": 8,
                "ffn_size": 8,
                "num_blocks": 1,
                "num_heads": 1,
                "dropout": 0.0,
                "attention_dropout": 0.0,
                **(overrides or {}),
            },
        ),
        data=DataConfig(dataset=str(data), max_len=6),
        train=TrainConfig(lr=1e-2, grad_clip=None, length_groups=1, **train),
        eval=EvalConfig(ks=(1,), batch_size=64),
    )
    split = load_split(config.data)
    model_ = build(config, split.num_items, split.num_users).double()
    return TrainingLoop(config, split, model_, distributed.Context())


def one_step(loop: TrainingLoop) -> float:
    """One optimiser step on every training example (one batch), epoch 1's stream."""
    return loop.train_step(np.arange(len(loop.examples)), loop.begin_epoch(1))


def captured_losses(monkeypatch) -> list[dict]:
    """Every ``LossConfig.compute`` call the trainer makes: its arguments and its value."""
    calls = []
    compute = LossConfig.compute

    def spy(self, hidden, positives, embedding, bias=None, negatives=None, log_q=None):
        value = compute(self, hidden, positives, embedding, bias, negatives, log_q)
        calls.append(
            {
                "hidden": hidden.detach(),
                "positives": positives,
                "embedding": embedding.detach().clone(),  # the step then moves the table
                "negatives": negatives,
                "value": float(value.detach()),
            }
        )
        return value

    monkeypatch.setattr(LossConfig, "compute", spy)
    return calls


# -- SAM (SAMRec): train.optimizer = "sam" ----------------------------------------------------


class ClosureOnly:
    """Stands in for a loop's optimiser: ``step`` runs the trainer's closure and moves nothing,
    so the model's ``.grad`` is the trainer's gradient at the current weights."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.zero_grad(set_to_none=True)

    def step(self, closure) -> float:
        return closure()


# the probe's scheduler steps an optimiser that never steps
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_sam_the_trainers_step_is_adamw_on_the_gradient_at_the_ascended_weights(tmp_path):
    """Through ``TrainingLoop.train_step``: w ← AdamW(w, ∇L(w + ρ g/‖g‖)), g = ∇L(w), the norm
    over all parameters together; plain AdamW's step from the same weights is another one."""
    data = write_events(tmp_path / "events.txt", 12, rows=16, length=7)
    rho = 0.3  # not the default 0.05: the configured ρ must be the one used
    sam = training_loop(data, "sasrec+", optimizer="sam", sam_rho=rho)
    start = {name: p.detach().clone() for name, p in sam.model.named_parameters()}
    one_step(sam)

    probe = training_loop(data, "sasrec+")
    probe.optimizer = ClosureOnly(probe.model)

    def gradient_at(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            for name, p in probe.model.named_parameters():
                p.copy_(weights[name])
        one_step(probe)
        return {
            name: torch.zeros_like(p) if p.grad is None else p.grad.clone()
            for name, p in probe.model.named_parameters()
        }

    g = gradient_at(start)
    norm = torch.sqrt(sum(v.pow(2).sum() for v in g.values()))
    ascended = gradient_at({name: w + rho * g[name] / norm for name, w in start.items()})

    base = training_loop(data, "sasrec+")  # AdamW with the run's lr, betas and warm-up
    for name, p in base.model.named_parameters():
        assert torch.equal(p, start[name])  # the same initial weights from the same seed
        p.grad = ascended[name]
    base.optimizer.step()
    plain = training_loop(data, "sasrec+")
    one_step(plain)
    moved_apart = 0.0
    for (name, p), expected, other in zip(
        sam.model.named_parameters(),
        base.model.parameters(),
        plain.model.parameters(),
        strict=True,
    ):
        torch.testing.assert_close(p, expected, **EXACT, msg=name)
        moved_apart = max(moved_apart, float((p - other).detach().abs().max()))
    assert moved_apart > 1e-3  # lr 1e-2: SAM's step is not AdamW's


# -- STRec: time-scored top-k queries, a shrinking cross-attention pyramid --------------------


def strec_by_hand(model, seq, times, by_time: bool = True) -> torch.Tensor:
    """Layer l keeps k_l = 4, 2, 1 tokens of the current ones (the last always): those whose
    time gap to the last event the selector MLP scores highest (``by_time``), else the most
    recent positions; the kept tokens query all current tokens at or before them."""
    x = model.embed(seq)
    valid = seq != 0
    gaps = (times - times[:, -1:]) / model.config.time_scale
    positions = torch.arange(seq.shape[1]).expand(len(seq), -1)
    for layer, k in zip(model.layers, (4, 2, 1), strict=True):
        first, second = layer.selector.mlp[0], layer.selector.mlp[2]
        hidden = torch.tanh(gaps[..., None] * first.weight[:, 0] + first.bias)
        score = hidden @ second.weight[0] + second.bias[0] if by_time else positions.double()
        score = score.masked_fill(~valid, float("-inf"))
        score[:, -1] = float("inf")
        kept = score.argsort(dim=1, descending=True)[:, :k].sort(dim=1).values
        queries = x.gather(1, kept[..., None].expand(-1, -1, x.shape[-1]))
        query_positions = positions.gather(1, kept)
        earlier = positions[:, None, :] <= query_positions[:, :, None]
        itself = positions[:, None, :] == query_positions[:, :, None]
        keep = (earlier & valid[:, None, :]) | itself
        out = layer.attention_norm(queries + layer.attention(queries, x, keep[:, None]))
        x = layer.ffn_norm(out + layer.ffn(out))
        positions, gaps, valid = (t.gather(1, kept) for t in (positions, gaps, valid))
    return x


def test_strec_time_scores_choose_the_queries_of_a_4_2_1_pyramid() -> None:
    model = built("strec", num_blocks=3, time_hidden=2)
    with torch.no_grad():  # every selector favours events 2 to 3.5 days before the last
        for layer in model.layers:
            first, second = layer.selector.mlp[0], layer.selector.mlp[2]
            first.weight.fill_(4.0)
            first.bias.copy_(torch.tensor([14.0, 8.0]))
            second.weight.copy_(torch.tensor([[1.0, -1.0]]))
    seq = windows()
    hours = torch.tensor([0.0, 1, 30, 31, 32, 80, 81, 100])
    times = torch.stack([hours, hours * 0.5, hours.flip(0).neg()]).double() * 3600
    out = model(seq, times)
    assert out.shape == (3, 1, 16)
    torch.testing.assert_close(out, strec_by_hand(model, seq, times), **EXACT)
    # the choice matters: keeping the most recent positions instead gives another output
    assert (out - strec_by_hand(model, seq, times, by_time=False)).abs().max() > 1e-3


def test_strec_training_adds_unit_gaussian_noise_to_the_standardised_time_scores() -> None:
    """In training the selector keeps the top k of ``z + ε``: ``z`` the MLP's scores
    standardised over the real positions, ``ε ~ N(0, 1)`` drawn per token; in evaluation ``z``
    alone. So the model's training outputs vary with the draw where its evaluation ones do not."""
    model = built("strec", num_blocks=3, time_hidden=2)
    selector = model.layers[0].selector
    generator = torch.Generator().manual_seed(5)
    gaps = -torch.rand(4, LENGTH, generator=generator, dtype=torch.float64) * 5
    valid = torch.ones(4, LENGTH, dtype=torch.bool)
    valid[1, :3] = False
    raw = selector.mlp(gaps[..., None])[..., 0]
    count = valid.sum(1, keepdim=True)
    mean = (raw * valid).sum(1, keepdim=True) / count
    std = (((raw - mean) * valid) ** 2).sum(1, keepdim=True).div(count).add(1e-5).sqrt()
    standardised = (raw - mean) / std

    def top(score: torch.Tensor, k: int = 3) -> torch.Tensor:
        score = score.masked_fill(~valid, float("-inf"))
        score[:, -1] = float("inf")
        return score.topk(k, dim=1).indices.sort(dim=1).values

    assert torch.equal(selector.eval()(gaps, valid, 3), top(standardised))
    selector.train()
    for seed in range(3):
        torch.manual_seed(seed)
        noise = torch.randn_like(standardised)
        torch.manual_seed(seed)
        assert torch.equal(selector(gaps, valid, 3), top(standardised + noise))
    seq, times = windows(), torch.arange(LENGTH, dtype=torch.float64).expand(3, -1) * 3600
    model.train()
    draws = []
    for seed in range(2):
        torch.manual_seed(seed)
        draws.append(model(seq, times))
    assert (draws[0] - draws[1]).abs().max() > 1e-3  # dropout is 0: the noise alone moved it
    model.eval()
    torch.testing.assert_close(model(seq, times), model(seq, times), **EXACT)


# -- ETRec: causal local window + pooled-block branch, gated; one FFN for all layers ----------


def test_etrec_local_window_each_output_reads_exactly_its_stacked_window() -> None:
    """Window w = 3, two layers, no block branch: position t reads items t − 4 … t (2(w − 1) + 1
    positions), nothing older and nothing later, on the chunked path (2w < L)."""
    model = built("etrec", max_len=10, local_window=3, block_branch=False)
    assert torch.equal(dependency(model, full_windows(2, 10, seed=3)), band(10, 5))


def test_etrec_block_branch_reads_old_items_through_their_block_mean() -> None:
    """One layer, window 2, blocks of 3 over 9 items: the last position reads items 0–2 (far
    outside its window) only through their block's mean, so shuffling the block changes
    nothing and changing one of its items changes the output."""
    model = built("etrec", max_len=9, num_blocks=1, local_window=2, block_size=3)
    seq = full_windows(2, 9, seed=4)
    last = model(seq)[:, -1]
    shuffled = seq.clone()
    shuffled[:, :3] = seq[:, [2, 0, 1]]
    torch.testing.assert_close(model(shuffled)[:, -1], last, **EXACT)
    assert (model(another_item(seq, 0))[:, -1] - last).abs().amax(-1).min() > 1e-6


def test_etrec_gate_open_to_the_local_branch_is_the_local_only_model() -> None:
    """``g ⊙ short + (1 − g) ⊙ long``: with the gate's bias at +60 (g = 1 to 1e-26) the model is
    the same weights without the block branch; at the drawn gate it is not."""
    gated = built("etrec", max_len=10, local_window=3, block_size=3)
    local = built("etrec", max_len=10, local_window=3, block_branch=False)
    own = gated.state_dict()
    local.load_state_dict(
        {
            key: own[key] if key in own else own[key.replace(".attention.", ".attention.short.")]
            for key in local.state_dict()
        }
    )
    seq = windows(length=10)
    assert (gated(seq) - local(seq)).abs().max() > 1e-3
    with torch.no_grad():
        for block in gated.stack.blocks:
            block.attention.gate.bias.fill_(60.0)
    torch.testing.assert_close(gated(seq), local(seq), **EXACT)


def test_etrec_shared_ffn_is_one_ffn_applied_in_every_layer() -> None:
    """The shared model equals the unshared one whose every layer holds a copy of that FFN."""
    shared = built("etrec", num_blocks=3, local_window=3, block_size=3)
    separate = built("etrec", num_blocks=3, local_window=3, block_size=3, share_ffn=False)
    own = shared.state_dict()
    separate.load_state_dict(
        {
            key: own[key] if key in own else own["stack.shared_ffn." + key.split(".ffn.")[1]]
            for key in separate.state_dict()
        }
    )
    seq = windows()
    torch.testing.assert_close(shared(seq), separate(seq), **EXACT)
    with torch.no_grad():
        shared.stack.shared_ffn.inner.weight.mul_(3.0)
    assert (shared(seq) - separate(seq)).abs().max() > 1e-3


# -- BSARec: α · (low-pass + β² · high-pass) + (1 − α) · attention ----------------------------


def low_pass_matrix(length: int, cutoff: int) -> torch.Tensor:
    """``(L, L)`` real DFT low-pass: frequencies 0 … c // 2 kept (each f > 0 with its mirror)."""
    positions = torch.arange(length, dtype=torch.float64)
    lag = positions[:, None] - positions[None, :]
    kept = [(f, 1.0 if f == 0 or 2 * f == length else 2.0) for f in range(cutoff // 2 + 1)]
    return sum(w * torch.cos(2 * math.pi * f * lag / length) for f, w in kept) / length


def test_bsarec_each_layer_mixes_the_fourier_filter_and_causal_attention_by_alpha() -> None:
    """``h = α · LN(x + LP x + β² ⊙ (x − LP x)) + (1 − α) · LN(x + MHSA(x))``, with the low-pass
    written as a DFT matrix; α = 0.3 and c = 3, not the defaults (0.7, 5)."""
    model = built("bsarec", alpha=0.3, cutoff=3)
    seq = windows()
    valid = seq != 0
    low_pass = low_pass_matrix(LENGTH, 3)
    x = model.embed(seq)
    for layer in model.layers:
        low = torch.einsum("ts,bsd->btd", low_pass, x)
        beta2 = layer.filter.sqrt_beta**2
        spectral = layer_norm(x + low + beta2 * (x - low), layer.filter.norm)
        causal = attention_mask(valid, causal=True)
        attended = layer_norm(x + layer.attention(x, x, causal), layer.attention_norm)
        h = 0.3 * spectral + 0.7 * attended
        x = layer.ffn_norm(h + layer.ffn(h))
    torch.testing.assert_close(model(seq), x * valid[..., None], **EXACT)


# -- SSE-PT: [item ; user] at every position, Stochastic Shared Embeddings ------------------------


SSEPT = {"num_users": 6, "user_size": 4, "user_sse": 0.0, "item_sse": 0.0}


def test_ssept_user_embedding_is_concatenated_to_every_position() -> None:
    """The encoder reads ``√d · [E[s_t] ; U[u + 1]] + P_t`` at every real position."""
    model = built("ssept", **SSEPT)
    seq, users = windows(), torch.tensor([2, 5, 0])
    valid = seq != 0
    items = model.items.input.weight[seq]
    user = model.users.weight[users + 1][:, None].expand(-1, LENGTH, -1)
    x = torch.cat([items, user], -1) * math.sqrt(16) + model.position.weight
    expected = model.encoder(x * valid[..., None], valid)
    torch.testing.assert_close(model(seq, users=users), expected, **EXACT)


@pytest.mark.parametrize("table", ["user", "item"])
def test_ssept_sse_replaces_ids_in_training_only_at_its_probability(table: str) -> None:
    """With the table's SSE probability 1 every id is swapped for a random one, so in training
    (same random stream) two inputs that differ only in those ids give the same output; at 0
    they do not, and in evaluation the probability changes nothing."""
    seq, users = windows(), torch.tensor([2, 5, 0])
    if table == "user":
        other_seq, other_users = seq, torch.tensor([4, 1, 3])
    else:
        other_seq, other_users = torch.where(seq != 0, seq % NUM_ITEMS + 1, 0), users
    always = built("ssept", **{**SSEPT, f"{table}_sse": 1.0})
    never = built("ssept", **SSEPT)

    def training_output(model, item_seq, user_ids):
        model.train()
        torch.manual_seed(5)
        out = model(item_seq, users=user_ids)
        model.eval()
        return out

    torch.testing.assert_close(
        training_output(always, seq, users),
        training_output(always, other_seq, other_users),
        **EXACT,
    )
    assert (
        training_output(never, seq, users) - training_output(never, other_seq, other_users)
    ).abs().amax(-1)[:, -1].min() > 1e-4
    torch.testing.assert_close(always(seq, users=users), never(seq, users=users), **EXACT)
    assert (always(seq, users=users) - always(other_seq, users=other_users)).abs().max() > 1e-4


# -- SRT: items from their features (no parameter per item); the preset's log-q correction ---


def with_titles(events, num_items: int):
    """A ``movies.dat`` beside ``events``: item i titled from two of six words, genre by i."""
    words = ["red", "blue", "night", "day", "story", "war"]
    genres = ("Drama", "Comedy", "War")
    movies = [
        f"{i}::{words[i % 6]} {words[(i // 6) % 6]} ({1990 + i % 9})::{genres[i % 3]}"
        for i in range(1, num_items + 1)
    ]
    (events.parent / "movies.dat").write_text("\n".join(movies) + "\n")
    return events


def test_srt_input_items_are_read_through_their_features_alone(tmp_path) -> None:
    """Give item 7 item 1's features: a window holding 7 is then read exactly as the same window
    holding 1, at every position, and the two score alike; with its own features it is not."""
    events = with_titles(write_events(tmp_path / "events.txt", NUM_ITEMS, 4, 6), NUM_ITEMS)
    model = built("srt", features_dataset=str(events), num_buckets=256, token_size=8)
    seq = windows()
    seq[:, 3] = 1
    with_seven = seq.clone()
    with_seven[:, 3] = 7
    assert (model(with_seven) - model(seq)).abs().amax(-1)[:, 3].min() > 1e-4
    twin = model.tower.item_tokens.clone()
    twin[7] = twin[1]
    model.tower.item_tokens = twin
    torch.testing.assert_close(model(with_seven), model(seq), **EXACT)
    scores = model.score_last(seq)
    torch.testing.assert_close(scores[:, 7], scores[:, 1], **EXACT)


def test_srt_trains_its_last_position_through_the_one_query_forward(tmp_path) -> None:
    """Objective "last" trains through ``last_hidden`` (the last block computes one query):
    the function, and the gradient, of ``forward(…)[:, -1]``; "causal" trains every position."""
    events = with_titles(write_events(tmp_path / "events.txt", NUM_ITEMS, 4, 6), NUM_ITEMS)
    model = built("srt", features_dataset=str(events), num_buckets=256, token_size=8)
    assert model.training_forward(set()) == model.last_position
    seq = windows()
    weights = torch.randn(3, TINY["hidden_size"], generator=torch.Generator().manual_seed(2))
    gradients = []
    for last in (lambda: model.last_hidden(seq), lambda: model(seq)[:, -1]):
        model.zero_grad()
        (last() * weights.double()).sum().backward()
        gradients.append({n: p.grad.clone() for n, p in model.named_parameters()})
    torch.testing.assert_close(model.last_hidden(seq), model(seq)[:, -1], **EXACT)
    assert model(seq)[:, -1].abs().amax(dim=1).min() > 0.1
    for name, gradient in gradients[1].items():
        torch.testing.assert_close(gradients[0][name], gradient, **EXACT, msg=name)
    causal = built("srt", features_dataset=str(events), num_buckets=256, objective="causal")
    assert causal.training_forward(set()) is causal


def test_srt_step_encodes_the_catalogue_once_with_every_length_groups_gradient(
    tmp_path, monkeypatch
) -> None:
    """A step over several length groups encodes the item tower's table once
    (``model.training_step()``) and gives every parameter the gradient of one encoding a group;
    the tower's weights get the output table's gradient, not only the inputs'."""
    events = with_titles(write_events(tmp_path / "events.txt", 30, 24, 9, skew=1.2), 30)
    gradients = {}
    for shared in (True, False):
        loop = training_loop(events, "srt", {"num_buckets": 256, "token_size": 8})
        loop.config = dataclasses.replace(
            loop.config, train=dataclasses.replace(loop.config.train, length_groups=4)
        )
        if not shared:
            monkeypatch.setattr(loop.model, "training_step", contextlib.nullcontext)
        encode, encodings = loop.model.tower._encode_table, []
        monkeypatch.setattr(
            loop.model.tower, "_encode_table", lambda e=encode, n=encodings: n.append(1) or e()
        )
        one_step(loop)
        assert len(encodings) == (1 if shared else 4)
        gradients[shared] = {n: p.grad.clone() for n, p in loop.model.named_parameters()}
    for name, gradient in gradients[False].items():
        torch.testing.assert_close(gradients[True][name], gradient, **EXACT, msg=name)
    assert gradients[True]["tower.adapter.weight"].abs().min() > 0


def sampled_softmax_by_hand(call: dict, log_q: torch.Tensor | None) -> float:
    """Mean over targets of ``logsumexp([s⁺, s⁻]) − s⁺`` with ``s = h · e − log q`` (the
    positive's too), a negative equal to its positive left out."""
    hidden, positives, negatives = call["hidden"], call["positives"], call["negatives"]
    table = call["embedding"]
    positive = (hidden * table[positives]).sum(-1)
    negative = torch.einsum("nd,nkd->nk", hidden, table[negatives])
    if log_q is not None:
        positive, negative = positive - log_q[positives], negative - log_q[negatives]
    negative = negative.masked_fill(negatives == positives[:, None], float("-inf"))
    logits = torch.cat([positive[:, None], negative], 1)
    return float((torch.logsumexp(logits, 1) - positive).mean())


def test_srt_preset_trains_on_the_log_q_corrected_sampled_softmax(tmp_path, monkeypatch) -> None:
    """The ``srt`` preset's loss, as the trainer computes it, is the sampled softmax over
    popularity-drawn negatives with every logit shifted by −log q, q the training popularity;
    without the shift it is a clearly different number."""
    events = with_titles(write_events(tmp_path / "events.txt", 30, 24, 9, skew=1.2), 30)
    calls = captured_losses(monkeypatch)
    loop = training_loop(events, "srt", {"num_buckets": 256, "token_size": 8})
    value = one_step(loop)
    (call,) = calls
    assert value == pytest.approx(call["value"], abs=1e-12)  # the loss that was trained
    counts = np.bincount(loop.split.train.items, minlength=loop.split.num_items + 1)
    with np.errstate(divide="ignore"):
        log_q = torch.from_numpy(np.log(counts / counts.sum()))
    assert np.ptp(counts[1:]) > 5  # popular and rare items, so the correction is not a constant
    assert len(call["negatives"][0]) == 300
    assert call["value"] == pytest.approx(sampled_softmax_by_hand(call, log_q), abs=1e-5)
    assert abs(call["value"] - sampled_softmax_by_hand(call, None)) > 1e-2


# -- AC-TSR: order and distance heads, adversarial mask, gate ----------------------------------


def actsr_model(**overrides):
    """Calibrators drawn large enough (std 0.3) that every term moves the attention."""
    model = built("actsr", **overrides)
    generator = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for block in model.blocks:
            for p in block.attention.parameters():
                p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * 0.3)
            block.attention.distance_scale.fill_(0.7)
    return model


def attack_mask_by_hand(module, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``M = softmax(mask(Q′ K′ᵀ / √d_h))`` from the attack projections."""
    batch, length, dim = x.shape
    size = dim // module.num_heads

    def split(t):
        return t.view(batch, length, module.num_heads, size).transpose(1, 2)

    scores = split(module.attack_q(x)) @ split(module.attack_k(x)).transpose(-2, -1)
    return masked_softmax(scores / math.sqrt(size), keep)


def actsr_attention_by_hand(module, x, keep, noise: torch.Tensor | None = None) -> torch.Tensor:
    """The calibrated attention (``noise`` None) or the perturbed one, from the formulas."""
    batch, length, dim = x.shape
    size = dim // module.num_heads

    def split(t):
        return t.view(batch, length, module.num_heads, size).transpose(1, 2)

    q, k, v = (split(p(x)) for p in (module.q_proj, module.k_proj, module.v_proj))
    i = torch.arange(length, dtype=torch.float64)[:, None]
    j = torch.arange(length, dtype=torch.float64)[None, :]

    def pair_head(on_query, on_key):  # a · q_i + c + b · k_j, a linear head on [q_i ; k_j]
        by_query = q @ on_query.weight[0] + on_query.bias[0]
        return by_query[..., :, None] + (k @ on_key.weight[0])[..., None, :]

    later = (j > i).double()  # y_ij
    order = pair_head(module.order_query, module.order_key)
    order_term = later * F.logsigmoid(order) + (1 - later) * F.logsigmoid(-order)
    distance = pair_head(module.distance_query, module.distance_key)
    gap = torch.log((i - j).abs() + 1)
    distance_term = -((gap - distance) ** 2) * module.distance_scale**2 / 2
    raw = q @ k.transpose(-2, -1) + order_term + distance_term
    spatial = masked_softmax(raw / math.sqrt(size), keep)
    attack = attack_mask_by_hand(module, x, keep)
    if noise is None:
        calibrated = masked_softmax(spatial * torch.exp(1 - attack), keep)
        gate = torch.sigmoid(q @ module.gate.weight.T + module.gate.bias)[..., -length:]
        weights = masked_softmax(gate * spatial + (1 - gate) * calibrated, keep)
    else:
        weights = masked_softmax(spatial * attack + noise * (1 - attack), keep)
    return module.out_proj((weights @ v).transpose(1, 2).reshape(batch, length, dim))


@pytest.mark.parametrize("stream", ["calibrated", "perturbed"])
def test_actsr_attention_is_the_calibrated_formula_in_both_streams(stream: str) -> None:
    """One block, a window of 6 under max_len 8 (the gate's columns are its last 6): the model's
    output is the block around the attention written from the paper's formulas."""
    model = actsr_model(num_blocks=1)
    seq = windows(length=6)
    valid = seq != 0
    keep = attention_mask(valid, causal=True)
    block = model.blocks[0]
    torch.manual_seed(8)
    out = model(seq, stream=stream)
    torch.manual_seed(8)  # the perturbed stream's ε is the forward's first draw
    noise = torch.randn(3, 2, 6, 6, dtype=torch.float64) if stream == "perturbed" else None
    x = model.embed(seq)
    h = block.attention_norm(x + actsr_attention_by_hand(block.attention, x, keep, noise))
    expected = block.ffn_norm(h + block.ffn(h)) * valid[..., None]
    torch.testing.assert_close(out, expected, **EXACT)


def test_actsr_attack_step_descends_minus_the_perturbed_loss_plus_the_mask_penalty() -> None:
    """``adversarial_step`` returns ``−L(perturbed) + λ · mean ‖1 − M‖₂`` (M by hand, every
    layer) and its step lowers that objective under the same noise: it ascends the loss."""
    model = actsr_model(num_blocks=2, mask_loss_weight=0.5)
    seq = windows(length=6)
    keep = attention_mask(seq != 0, causal=True)
    targets = torch.tensor([3, 9, 14])

    def loss_of_hidden(hidden):
        logits = model.logits(hidden[:, -1])
        return F.cross_entropy(logits[:, 1:], targets - 1)

    @torch.no_grad()
    def objective() -> float:
        inputs = []
        hooks = [
            block.attention.register_forward_hook(lambda m, args, out: inputs.append(args[0]))
            for block in model.blocks
        ]
        torch.manual_seed(9)
        loss = loss_of_hidden(model(seq, stream="perturbed"))
        for hook in hooks:
            hook.remove()
        penalty = torch.stack(
            [
                (1 - attack_mask_by_hand(block.attention, x, keep)).pow(2).sum(-1).sqrt().mean()
                for block, x in zip(model.blocks, inputs, strict=True)
            ]
        ).mean()
        return float(-loss + 0.5 * penalty)

    before = objective()
    torch.manual_seed(9)
    value = model.adversarial_step(
        seq, loss_of_hidden, torch.optim.SGD(model.attack_parameters(), lr=0.05)
    )
    assert value == pytest.approx(before, abs=1e-10)
    assert objective() < before - 1e-6


@pytest.mark.parametrize("objective", ["last", "causal"])
def test_actsr_trainer_step_attacks_the_loss_it_trains_on(tmp_path, monkeypatch, objective):
    """Through the trainer, under either objective, the attack step ascends the loss the model
    is trained on: the last position's (``(B, 1, D)``, the last block's one query) under the
    paper's ``last``, every position's (``(B, L, D)``, the whole perturbed forward under the
    same noise) under ``causal``."""
    from attnsvm.rec.models import actsr

    data = write_events(tmp_path / "events.txt", 30, 12, 8)
    loop = training_loop(data, "actsr", {"objective": objective})
    attacked = []
    step = actsr.adversarial_step

    def spy(model, item_seq, loss_of_hidden, optimizer):
        start = torch.get_rng_state()  # the noise the step draws next

        def recorded(hidden):
            # the whole perturbed forward from the same draws, then the step's state put back
            penalties = [block.attention.mask_penalty for block in model.blocks]
            after = torch.get_rng_state()
            torch.set_rng_state(start)
            with torch.no_grad():
                whole = model(item_seq, stream="perturbed")
            torch.set_rng_state(after)
            for block, penalty in zip(model.blocks, penalties, strict=True):
                block.attention.mask_penalty = penalty
            attacked.append((hidden.detach(), whole))
            return loss_of_hidden(hidden)

        return step(model, item_seq, recorded, optimizer)

    monkeypatch.setattr(actsr, "adversarial_step", spy)
    one_step(loop)
    ((hidden, whole),) = attacked
    expected = whole[:, -1:] if objective == "last" else whole
    torch.testing.assert_close(hidden, expected, **EXACT)


# -- SASRec, gSASRec (causal) and BERT4Rec (bidirectional); gSASRec's gBCE ---------------------


@pytest.mark.parametrize("name", ["sasrec", "gsasrec"])
def test_sasrec_causal_training_output_at_t_reads_every_item_up_to_t_and_none_after(name) -> None:
    """In training mode (the forward the loss sees; dropout 0 so it is deterministic)."""
    model = built(name, num_blocks=2).train()
    assert torch.equal(dependency(model, full_windows(2, LENGTH, seed=1)), band(LENGTH, LENGTH))


def test_bert4rec_bidirectional_every_position_reads_every_item() -> None:
    """In training mode, as the cloze loss sees it: a masked position reads both sides."""
    model = built("bert4rec", num_blocks=2).train()
    seq = full_windows(2, LENGTH, seed=1)
    seq[:, [2, 5]] = model.mask_token
    reads = dependency(model, seq)
    assert torch.equal(reads, torch.ones(LENGTH, LENGTH, dtype=torch.bool))


def test_bert4rec_trains_on_the_cloze_task_the_encoder_reads_the_mask_where_it_predicts(
    tmp_path, monkeypatch
) -> None:
    """BERT4Rec's step through the trainer: the encoder's input holds the mask token exactly
    where the loss has a target, those targets are the items the mask hides, and every other
    item is read as it is (a trainer that drew the mask but fed the clean rows would train the
    model to copy its input)."""
    data = write_events(tmp_path / "events.txt", 30, 12, 8)
    calls = captured_losses(monkeypatch)
    loop = training_loop(data, "bert4rec")
    model = loop.model
    originals, read = [], []
    mask_items = model.mask_items

    def spy(item_seq, generator=None):
        originals.append(item_seq.clone())
        return mask_items(item_seq, generator=generator)

    monkeypatch.setattr(model, "mask_items", spy)
    hook = model.register_forward_pre_hook(lambda module, args: read.append(args[0].clone()))
    one_step(loop)
    hook.remove()
    (original,), (encoded,), (call,) = originals, read, calls
    masked = encoded == model.mask_token
    assert 0 < int(masked.sum()) < int((original != 0).sum())
    assert torch.equal(encoded[~masked], original[~masked])
    assert torch.equal(call["positives"], original[masked])


def test_bert4rec_scores_the_next_item_by_the_masked_lm_head_at_an_appended_mask() -> None:
    """``LN(GELU(W h + b))`` over the bidirectional encoder's states (BERT's
    ``get_masked_lm_output``), zero at padding; the next item is scored at a mask token appended
    after the history (the oldest item dropped from a full window), against the tied item table
    plus the output bias."""
    model = built("bert4rec")
    with torch.no_grad():
        model.items.bias.normal_()
    seq = windows()
    valid = seq != 0
    dense, activation, norm = model.head
    encoded = model.encoder(model.embed(seq), valid)
    expected = norm(activation(dense(encoded))) * valid[..., None]
    torch.testing.assert_close(model(seq), expected, **EXACT)
    assert (expected - encoded).abs().max() > 1e-3  # the head is not the identity
    with_mask = torch.cat([seq[:, 1:], torch.full_like(seq[:, :1], model.mask_token)], dim=1)
    table = model.items.input.weight[: NUM_ITEMS + 1]  # the mask token's row is not scored
    scores = model(with_mask)[:, -1] @ table.T + model.items.bias
    scores[:, 0] = float("-inf")
    torch.testing.assert_close(model.score_last(seq), scores, **EXACT)


def gbce_by_hand(call: dict, t: float, num_items: int) -> float:
    """``1/(k+1) · [β · softplus(−s⁺) + Σ_j softplus(s⁻_j)]`` (hits left out), mean over targets,
    ``β = α (t (1 − 1/α) + 1/α)``, ``α = k / (|I| − 1)``."""
    hidden, positives, negatives = call["hidden"], call["positives"], call["negatives"]
    table = call["embedding"]
    k = negatives.shape[1]
    alpha = k / (num_items - 1)
    beta = alpha * (t * (1 - 1 / alpha) + 1 / alpha)
    positive = (hidden * table[positives]).sum(-1)
    negative = torch.einsum("nd,nkd->nk", hidden, table[negatives])
    negative_terms = (F.softplus(negative) * (negatives != positives[:, None])).sum(-1)
    return float(((beta * F.softplus(-positive) + negative_terms) / (k + 1)).mean())


def test_gsasrec_gbce_t_calibrates_the_presets_loss_as_the_formula_says(tmp_path, monkeypatch):
    """The ``gsasrec`` preset's loss (256 negatives, t = 0.75), and the same at t = 0 and 1,
    through the trainer: each value is gBCE by hand, so the values at two t differ by
    ``(β₁ − β₂) · mean softplus(−s⁺) / (k + 1)`` on the same hidden states and negatives."""
    num_items = 300
    data = write_events(tmp_path / "events.txt", num_items, 20, 8)
    calls = captured_losses(monkeypatch)
    values = {}
    for t in (0.75, 0.0, 1.0):
        loop = training_loop(data, "gsasrec")
        if t != 0.75:
            loop.loss = dataclasses.replace(loop.loss, gbce_t=t)
        assert loop.loss.name == "gbce" and loop.loss.num_negatives == 256
        assert loop.split.num_items == num_items
        values[t] = one_step(loop)
        assert values[t] == pytest.approx(calls[-1]["value"], abs=1e-12)
        assert values[t] == pytest.approx(gbce_by_hand(calls[-1], t, num_items), abs=1e-10)
    first = calls[0]
    for call in calls[1:]:  # the same step: what differs is t alone
        assert torch.equal(call["hidden"], first["hidden"])
        assert torch.equal(call["negatives"], first["negatives"])
    alpha = 256 / (num_items - 1)
    positive = (first["hidden"] * first["embedding"][first["positives"]]).sum(-1)
    slope = float(F.softplus(-positive).mean()) / 257
    assert values[0.0] - values[1.0] == pytest.approx((1 - alpha) * slope, abs=1e-10)
    assert values[0.0] - values[1.0] > 1e-5


# -- MaTrRec: Mamba's selective scan, then a transformer layer --------------------------------


def mamba_by_hand(mamba, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``W_out (y ⊙ SiLU(z))`` with y the recurrence ``h_t = exp(Δ_t A) h_{t−1} + Δ_t B_t u_t``,
    ``y_t = C_t · h_t + D u_t``, stepped one position at a time (Δ = 0 at padding)."""
    length = x.shape[1]
    u, z = (x @ mamba.in_proj.weight.T).chunk(2, dim=-1)
    kernel = mamba.conv.weight[:, 0]  # (channels, K): causal, K − 1 zeros before the window
    size = kernel.shape[1]
    padded = F.pad(u * valid, (0, 0, size - 1, 0))
    conv = sum(kernel[:, m] * padded[:, m : m + length] for m in range(size)) + mamba.conv.bias
    u = F.silu(conv)
    low, B, C = (u @ mamba.x_proj.weight.T).split([mamba.rank, *2 * [mamba.state_size]], -1)
    delta = F.softplus(low @ mamba.dt_proj.weight.T + mamba.dt_proj.bias) * valid
    A = -torch.exp(mamba.A_log.float()).double()  # in float32, as Mamba's own code has it
    state = torch.zeros(x.shape[0], u.shape[-1], mamba.state_size, dtype=x.dtype)
    ys = []
    for t in range(length):
        state = torch.exp(delta[:, t, :, None] * A) * state
        state = state + (delta[:, t] * u[:, t])[..., None] * B[:, t, None, :]
        ys.append((state * C[:, t, None, :]).sum(-1) + mamba.D * u[:, t])
    return (torch.stack(ys, 1) * F.silu(z)) @ mamba.out_proj.weight.T


def matrrec_model(**overrides):
    """Projections at std 0.3 instead of 0.02 and Δ ≈ 0.5 instead of 1e-3 … 0.1, so that the
    Mamba branch is not ~1e-3 of the residual and the state carries the window's history."""
    model = built("matrrec", num_blocks=1, state_size=4, **overrides)
    mamba = model.layers[0].mamba
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for projection in (mamba.in_proj, mamba.x_proj, mamba.out_proj):
            projection.weight.normal_(std=0.3, generator=generator)
        mamba.dt_proj.bias.fill_(math.log(math.expm1(0.5)))
    return model


@pytest.mark.parametrize("scan", ["sequential", "parallel"])
def test_matrrec_layer_is_the_selective_scan_then_the_transformer(scan: str) -> None:
    """``x ← LN(x + Mamba(x))`` with Mamba stepped by hand, then the causal transformer block."""
    model = matrrec_model(scan=scan)
    seq = windows()
    valid = (seq != 0)[..., None].double()
    layer = model.layers[0]
    x = model.embed(seq)
    x = layer.mamba_norm(x + mamba_by_hand(layer.mamba, x, valid)) * valid
    expected = layer.transformer(x, attention_mask(seq != 0, causal=True)) * valid
    torch.testing.assert_close(model(seq), expected, **EXACT)


def test_matrrec_output_depends_on_the_state_space_parameters() -> None:
    """A (decay), Δ (step) and B, C (state read/write) each move the model's output."""
    seq = windows()
    out = matrrec_model()(seq)
    for change in ("A_log", "dt_proj.bias", "x_proj.weight"):
        model = matrrec_model()
        with torch.no_grad():
            model.layers[0].mamba.get_parameter(change).add_(0.5)
        assert (model(seq) - out).abs().max() > 1e-3, change


# -- AdaMCT: causal attention and a local CNN, squeeze-excitation, a per-user gate -------------


def squeeze_excitation_by_hand(se, h: torch.Tensor) -> torch.Tensor:
    """``h ⊙ σ(W₂ ReLU(W₁ mean_channels(h) + b₁) + b₂)``, one weight per position."""
    squeezed = F.relu(h.mean(-1) @ se.squeeze.weight.T + se.squeeze.bias)
    return h * torch.sigmoid(squeezed @ se.excite.weight.T + se.excite.bias)[..., None]


def test_adamct_layer_mixes_attention_and_local_cnn_by_each_users_gate() -> None:
    """One layer from its formulas: each user's ``α = σ(w · mean_t x_t + b)`` mixes the
    squeeze-excited attention branch with the squeeze-excited centred-convolution branch."""
    model = built("adamct", num_blocks=1, kernel_size=3)
    with torch.no_grad():  # a gate that differs clearly between users
        model.layers[0].mixture.weight.normal_(std=2.0, generator=torch.Generator().manual_seed(1))
    layer = model.layers[0]
    seq = windows()
    valid = (seq != 0)[..., None].double()
    x = model.embed(seq)
    entered = layer_norm(x @ layer.enter.weight.T + layer.enter.bias, layer.enter_norm) * valid
    causal = attention_mask(seq != 0, causal=True)
    attended = squeeze_excitation_by_hand(
        layer.global_se, layer.attention(entered, entered, causal) * valid
    )
    weight = layer.conv.weight  # (out, in, 3): y_t = W₀ x_{t−1} + W₁ x_t + W₂ x_{t+1} + b
    padded = F.pad(entered, (0, 0, 1, 1))
    local = sum(padded[:, m : m + LENGTH] @ weight[:, :, m].T for m in range(3)) + layer.conv.bias
    local = layer_norm(local, layer.conv_norm)
    local = squeeze_excitation_by_hand(layer.local_se, layer.activation(local) * valid)
    alpha = torch.sigmoid(x.mean(1) @ layer.mixture.weight.T + layer.mixture.bias)[:, None]
    assert alpha.flatten().max() - alpha.flatten().min() > 0.05
    mixed = (1 - alpha) * attended + alpha * local
    expected = layer_norm(mixed @ layer.out.weight.T + layer.out.bias + x, layer.out_norm)
    torch.testing.assert_close(model(seq), expected * valid, **EXACT)


# -- ConvFormer (LighTCN): causal depth-wise large-kernel convolution --------------------------


@pytest.mark.parametrize("fft", [False, True])
def test_convformer_output_at_t_reads_exactly_the_kernels_span_before_t(fft: bool) -> None:
    """One layer, kernel 5 over 10 positions: output t reads items t − 4 … t, nothing else."""
    model = built("convformer", max_len=10, num_blocks=1, kernel_size=5, fft=fft)
    assert torch.equal(dependency(model, full_windows(2, 10, seed=2)), band(10, 5))


def test_convformer_mixer_is_one_causal_filter_per_channel() -> None:
    """``y_{t,c} = Σ_m w_{c, k−1−m} x_{t−m, c}``; then ``LN(x + y)`` and the FFN."""
    model = built("convformer", num_blocks=1, kernel_size=6, kernel_init_std=0.3)
    layer = model.layers[0]
    seq = windows()
    x = model.embed(seq)
    w = layer.conv.weight[:, 0]  # (channels, k)
    y = torch.zeros_like(x)
    for t in range(LENGTH):
        for m in range(min(6, t + 1)):
            y[:, t] += w[:, 5 - m] * x[:, t - m]
    h = layer.conv_norm(x + y)
    expected = layer.ffn_norm(h + layer.ffn(h)) * (seq != 0)[..., None]
    torch.testing.assert_close(model(seq), expected, **EXACT)
