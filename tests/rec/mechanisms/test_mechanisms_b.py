"""Each system's key mechanism reaches its output or its training signal as its paper says:
SDAT, the Non-Stationary transformer, SMM, ADT, BiCAT, MrTransformer, CRR, the PI-Transformer
and the stream runner's replay, RLT4Rec; and every staged run starts from the previous stage's
weights bit for bit at its first optimiser step.

Each test observes the mechanism through the model's forward or the trainer's step (recorded
attention, hooks on a module's input or output, the gradient each loss term passes back), so
deleting the mechanism, zeroing it, ignoring its switch or skipping a stage's load fails one."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.data.datasets import load_dataset
from attnsvm.rec.models import build_model
from attnsvm.rec.models.adt import ADT
from attnsvm.rec.models.bicat import BiCAT
from attnsvm.rec.models.mrtransformer import MrTransformer
from attnsvm.rec.models.pitransformer import PITransformer, PITransformerConfig
from attnsvm.rec.models.rlt4rec import RLT4Rec
from attnsvm.rec.nn.attention import attention_mask, record_attention
from attnsvm.rec.nn.stationary import window_statistics
from attnsvm.rec.nn.time_intervals import time_buckets
from attnsvm.rec.rl import crr_trainer
from attnsvm.rec.rl.crr import CRRConfig, Networks, crr_losses, target_copy, transitions
from attnsvm.rec.sim.rlt4rec_training import EpisodeSettings, episode_run_config, train_rlt4rec
from attnsvm.rec.sim.simulator import FitSettings, fit_simulator
from attnsvm.rec.stream import StreamConfig
from attnsvm.rec.stream import runner as stream_runner
from attnsvm.rec.stream.events import load_stream
from attnsvm.rec.stream.learner import chunk_states
from attnsvm.rec.train import distributed, generate, train
from attnsvm.rec.train.checkpoint import read_weights
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.recipe import run_recipe
from attnsvm.rec.train.scoring import build, load_split
from attnsvm.rec.train.streams import TrainingStreams

NUM_ITEMS = 30
STEP = 3  # the walks' stride: each user's next item is the previous one + 3 (mod NUM_ITEMS)
TINY = {"hidden_size": 16, "ffn_size": 16, "num_heads": 2, "dropout": 0.0}
TINY |= {"attention_dropout": 0.0}
EXACT = {"atol": 1e-10, "rtol": 0.0}


# -- data and recorders ----------------------------------------------------------------------------
# small copies of the train, rl and stream folders' data helpers: each test folder is its own
# import root, so theirs cannot be imported from here


def write_walks(path: Path, users: int = 80) -> Path:
    """``user i1 i2 …`` lines: a random start, then +STEP (mod NUM_ITEMS) per step."""
    rng = np.random.default_rng(0)
    lines = []
    for user in range(users):
        length, start = rng.integers(5, 11), rng.integers(NUM_ITEMS)
        walk = [(start + STEP * step) % NUM_ITEMS + 1 for step in range(length)]
        lines.append(" ".join(map(str, [user + 100, *walk])))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_rated(path: Path, users: int = 60, rated: int = 12) -> Path:
    """A MovieLens ``ratings.csv``: three taste groups, each rating its own block of ten items
    4–5 and the others 1–3, one second apart."""
    rng = np.random.default_rng(0)
    lines = ["userId,movieId,rating,timestamp"]
    for user in range(users):
        items = rng.choice(NUM_ITEMS, size=rated, replace=False) + 1
        liked = (items - 1) // 10 == user % 3
        scores = np.where(liked, rng.integers(4, 6, rated), rng.integers(1, 4, rated))
        lines += [
            f"{user + 1},{i},{s}.0,{user * 100 + t}"
            for t, (i, s) in enumerate(zip(items, scores, strict=True))
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_clicks(path: Path, sessions: int = 30, length: int = 8, items: int = 15) -> Path:
    """A session-rec TSV whose sessions follow a cycle of ``items`` items, interleaved in time."""
    rng = np.random.default_rng(0)
    lines = ["SessionId\tItemId\tTime"]
    for session in range(1, sessions + 1):
        start = int(rng.integers(0, items))
        for step in range(length):
            item = 100 + (start + step) % items
            lines.append(f"{session}\t{item}\t{session * 7.0 + step * 11.0}")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_catalogue(folder: Path, first_id: int, shift: int, items: int = 20) -> Path:
    """Walks over movies with external ids ``first_id …`` and a ``movies.dat`` beside them
    (``shift`` moves the titles: two catalogues share words, not ids)."""
    folder.mkdir()
    lines = []
    for user in range(40):
        walk = [
            first_id + ((user * 7) % items + STEP * step) % items for step in range(4 + user % 5)
        ]
        lines.append(" ".join(map(str, [user + 1, *walk])))
    (folder / "walks.txt").write_text("\n".join(lines) + "\n")
    words = ("red", "blue", "night", "day", "war", "love", "city")
    movies = [
        f"{first_id + i}::{words[(i + shift) % 7]} {words[(i + shift) // 7 % 7]} (199{i % 10})::"
        f"{'Drama' if i % 2 else 'Comedy'}"
        for i in range(items)
    ]
    (folder / "movies.dat").write_text("\n".join(movies) + "\n")
    return folder / "walks.txt"


def run_config(data: Path, model: str, epochs: int = 2, **overrides) -> RunConfig:
    return RunConfig(
        model=ModelChoice(model, {**TINY, "num_blocks": 1, **overrides}),
        data=DataConfig(dataset=str(data), max_len=12),
        train=TrainConfig(epochs=epochs, batch_size=32, lr=1e-2),
        eval=EvalConfig(ks=(1, 10), batch_size=64),
    )


def clone_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def same_weights(state: dict[str, torch.Tensor], saved: dict[str, torch.Tensor]) -> bool:
    return set(state) == set(saved) and all(torch.equal(state[k], saved[k]) for k in saved)


class FirstSteps:
    """What each run of the platform's training loop reads at its first optimiser step, one
    record per run in run order: the weights (``state``), the prepared batch (``step``), the
    training streams (``streams``) and, for ``watched`` (a model class), the gradient each of
    its auxiliary terms receives from the step's loss (``term_grads``: its weight there)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, watched: type | None = None) -> None:
        self.runs: list[dict] = []
        self._open: dict | None = None
        train_step, prepare = TrainingLoop.train_step, TrainingLoop._prepare
        stream_batch = TrainingStreams.batch

        def first_step(loop, index, generator):
            if loop.step:
                return train_step(loop, index, generator)
            self._open = {"state": clone_state(loop.model), "term_grads": {}}
            self.runs.append(self._open)
            try:
                return train_step(loop, index, generator)
            finally:
                self._open = None

        def prepared(loop, batch, generator):
            step = prepare(loop, batch, generator)
            if self._open is not None:
                self._open.setdefault("step", step)
            return step

        def streams(training_streams, index, step):
            rows = stream_batch(training_streams, index, step)
            if self._open is not None:
                self._open.setdefault("streams", rows)
            return rows

        monkeypatch.setattr(TrainingLoop, "train_step", first_step)
        monkeypatch.setattr(TrainingLoop, "_prepare", prepared)
        monkeypatch.setattr(TrainingStreams, "batch", streams)
        if watched is not None:
            terms = watched.auxiliary_losses

            def hooked(model, names, *args, **kwargs):
                out = terms(model, names, *args, **kwargs)
                if self._open is not None:
                    grads = self._open["term_grads"]
                    for name, term in out.items():
                        grads.setdefault(name, 0.0)
                        if term.requires_grad:  # a term that cannot train anything passes 0
                            term.register_hook(gradient_adder(grads, name))
                return out

            monkeypatch.setattr(watched, "auxiliary_losses", hooked)


def gradient_adder(grads: dict[str, float], name: str):
    """A tensor hook adding the gradient a scalar loss term receives to ``grads[name]``."""

    def add(grad: torch.Tensor) -> None:
        # length groups each pass back weight × their share of the batch: summed, the weight
        grads[name] += float(grad)

    return add


@pytest.fixture(scope="module")
def single_thread():
    """Module fixtures train whole runs: one thread, as the per-test fixture gives the rest."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def walks(tmp_path_factory) -> Path:
    return write_walks(tmp_path_factory.mktemp("walks") / "walks.txt")


# -- SDAT ------------------------------------------------------------------------------------------


def sdat(**overrides):
    torch.manual_seed(0)
    return build_model("sdat", NUM_ITEMS, **TINY, max_len=8, **overrides).double().eval()


def test_sdat_interval_bias_lowers_attention_to_older_events_by_their_log_interval():
    """One item repeated at equal gaps gives identical keys, so the first layer's attention of
    the last event is the softmax of the interval bias alone: older events get exactly
    exp(−λ_h log(1 + Δ / unit)) of the newest one's weight. Every layer adds the same bias."""
    model = sdat()
    length, gap = 6, 10 * 86400.0
    seq = torch.full((1, length), 7)
    times = 1.6e9 + gap * torch.arange(length, dtype=torch.float64)[None]
    with torch.no_grad():  # the first event's "no previous event" bucket, made like the others
        table = model.time_encoding.embedding.weight
        table[0] = table[time_buckets(torch.tensor(gap), model.config.time_buckets)]
    with record_attention(model) as recorder:
        model(seq, timestamps=times)
    last = recorder.attention[0][0, :, -1]  # (H, L): the newest event's query
    interval = (times[0, -1] - times[0]) / model.config.time_unit
    slope = F.softplus(model.interval_bias.raw_slope.detach())
    expected = -slope[:, None] * torch.log1p(interval)[None]
    torch.testing.assert_close(last.log() - last[:, -1:].log(), expected, atol=1e-9, rtol=0)
    assert (last.diff(dim=1) > 0).all()  # the more recent, the more attended
    intervals = (times[:, :, None] - times[:, None, :]).clamp(min=0) / model.config.time_unit
    bias = -slope[None, :, None, None] * torch.log1p(intervals)[:, None]
    keep = attention_mask(seq != 0, causal=True)
    layers = zip(model.attention_modules(), recorder.attention, recorder.layer_inputs, strict=True)
    for attention, weights, inputs in layers:
        q = attention._heads(attention.q_proj(inputs.query))
        k = attention._heads(attention.k_proj(inputs.key))
        logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
        expected = logits.masked_fill(~keep, -math.inf).softmax(-1)
        torch.testing.assert_close(weights, expected, atol=1e-12, rtol=0)


def test_sdat_recency_gain_scales_each_keys_value_by_its_recency():
    """``out = (A ⊙ G) V`` in every layer's attention with G = 1 + α_h exp(−Δ / (unit κ_h)):
    the heads' output before W_O, from the recorded A and the layer's own values."""
    model = sdat()
    with torch.no_grad():  # α starts at 0 (no gain); a trained model's is not
        model.recency_gain.amplitude.copy_(torch.tensor([0.8, 1.5]))
    seq = torch.tensor([[3, 9, 4, 12, 5, 20], [0, 0, 8, 2, 17, 6]])
    gaps = torch.tensor([[0.0, 2, 30, 1, 7, 0.5], [0, 0, 3, 40, 0.2, 9]]) * 3600
    times = 1.6e9 + gaps.double().cumsum(1)
    intervals = (times[:, :, None] - times[:, None, :]).clamp(min=0) / model.config.time_unit
    kappa = F.softplus(model.recency_gain.raw_scale.detach())[None, :, None, None]
    amplitude = model.recency_gain.amplitude.detach()[None, :, None, None]
    gain = 1 + amplitude * torch.exp(-intervals[:, None] / kappa)
    attentions = model.attention_modules()
    merged = []
    hooks = [
        attention.out_proj.register_forward_pre_hook(lambda _, args: merged.append(args[0]))
        for attention in attentions
    ]
    with record_attention(model) as recorder:
        model(seq, timestamps=times)
    for hook in hooks:
        hook.remove()
    assert len(merged) == len(attentions) == 2
    layers = zip(attentions, recorder.attention, recorder.layer_inputs, merged, strict=True)
    for attention, weights, inputs, heads in layers:
        values = attention._heads(attention.v_proj(inputs.key))  # (B, H, L, d_h)
        expected = ((weights * gain) @ values).transpose(1, 2).flatten(2)
        torch.testing.assert_close(heads, expected, atol=1e-12, rtol=0)
        assert not torch.allclose(heads, (weights @ values).transpose(1, 2).flatten(2))


def test_sdat_recency_gain_gets_a_training_signal_at_initialisation():
    """α starts at 0, where the gain is 1: only a gradient on α lets training grow it."""
    model = sdat().train()
    seq = torch.tensor([[3, 9, 4, 12, 5, 20, 7, 1]])
    times = 1.6e9 + torch.arange(8, dtype=torch.float64)[None] * 5 * 3600
    hidden = model(seq[:, :-1], timestamps=times[:, :-1])
    F.cross_entropy(model.logits(hidden[0]), seq[0, 1:]).backward()
    assert (model.recency_gain.amplitude.grad.abs() > 0).all()


def test_sdat_time_encoding_marks_each_event_by_the_gap_before_it():
    """With the interval bias and the gain off, event times reach the model only through the
    time encoding: a longer gap before event 4 changes the outputs from event 4 on and none
    before it (causal), so the encoding stands in for the positions."""
    model = sdat(interval_bias="none", recency_gain=False)
    assert model.config.position == "none"
    seq = torch.tensor([[3, 9, 4, 12, 5, 20, 7, 1], [0, 0, 8, 2, 17, 6, 11, 14]])
    times = 1.6e9 + torch.arange(8, dtype=torch.float64)[None].expand(2, -1) * 3600
    later = times.clone()
    later[:, 4:] += 3 * 86400  # the gap before event 4: an hour → three days and an hour
    with torch.no_grad():
        before, after = model(seq, timestamps=times), model(seq, timestamps=later)
    torch.testing.assert_close(after[:, :4], before[:, :4], atol=1e-12, rtol=0)
    assert (after[:, 4:] - before[:, 4:]).abs().amax(-1).min() > 1e-6


def test_sdat_gru_head_aggregates_the_encoder_states_item_by_item():
    """The output is a GRU run over the encoder's states at the real positions, in order,
    from a zero state, in the forward and in the scoring path alike."""
    model = sdat()
    seq = torch.tensor([[3, 9, 4, 12, 5, 20, 7, 1], [0, 0, 0, 8, 2, 17, 6, 11]])
    times = 1.6e9 + torch.arange(8, dtype=torch.float64)[None].expand(2, -1) * 7200
    encoded = []
    hook = model.stack.register_forward_hook(lambda _, __, out: encoded.append(out))
    with torch.no_grad():
        out = model(seq, timestamps=times)
        scores = model.score_last(seq, timestamps=times)
        for row in range(2):
            real = seq[row] != 0
            expected, _ = model.gru.gru(encoded[0][row, real][None])
            torch.testing.assert_close(out[row, real], expected[0], atol=1e-12, rtol=0)
            assert not torch.allclose(out[row, real], encoded[0][row, real])
    hook.remove()
    torch.testing.assert_close(scores[:, 1:], model.logits(out[:, -1])[:, 1:], atol=1e-10, rtol=0)


# -- the Non-Stationary transformer ----------------------------------------------------------------


def nstransformer(**overrides):
    torch.manual_seed(0)
    options = {**TINY, "num_blocks": 2, "max_len": 10, "projector_hidden": 16, **overrides}
    return build_model("nstransformer", NUM_ITEMS, **options).double().eval()


def rated_windows() -> tuple[torch.Tensor, torch.Tensor]:
    """Three windows, two left-padded; ratings 1–5 at the real positions."""
    generator = torch.Generator().manual_seed(0)
    items = torch.randint(1, NUM_ITEMS + 1, (3, 10), generator=generator)
    items[0, :4] = 0
    items[1, :1] = 0
    ratings = torch.randint(1, 6, (3, 10), generator=generator).double()
    return items, ratings * (items != 0)


class Captured:
    """A forward hook keeping a module's last inputs and output."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.handle = module.register_forward_hook(self)

    def __call__(self, _, args, out) -> None:
        self.args, self.out = args, out


def destationary_softmax(logits, keep, tau, delta) -> torch.Tensor:
    """``softmax(τ_t logits_ts + Δ_ts)`` over the kept keys."""
    scores = tau[:, None, :, None] * logits + delta
    return scores.masked_fill(~keep, -math.inf).softmax(-1)


def test_nstransformer_tau_and_delta_rescale_and_shift_every_layers_attention():
    """Every layer attends by ``softmax((τ_t q_t·k_s + Δ_ts) / √d_h)`` with the τ and Δ the
    projectors learned from the removed statistics (weights drawn wider than by default, so
    that τ, Δ and the logits are far from 1, 0 and 0)."""
    net = nstransformer(init_std=0.2)
    items, ratings = rated_windows()
    factors = Captured(net.factors)
    with record_attention(net) as recorder:
        net(items, ratings)
    tau, delta = factors.out  # (B, L) and (B, 1, L, L), Δ already divided by √d_h
    keep = attention_mask(items != 0, causal=True)
    head_dim = net.config.hidden_size // net.config.num_heads
    layers = list(
        zip(net.attention_modules(), recorder.attention, recorder.layer_inputs, strict=True)
    )
    assert len(layers) == 2
    for attention, weights, inputs in layers:
        q = attention._heads(attention.q_proj(inputs.query))
        k = attention._heads(attention.k_proj(inputs.key))
        logits = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
        expected = destationary_softmax(logits, keep, tau, delta)
        torch.testing.assert_close(weights, expected, atol=1e-12, rtol=0)
        without_tau = destationary_softmax(logits, keep, torch.ones_like(tau), delta)
        assert not torch.allclose(weights, without_tau, atol=1e-4)
        assert not torch.allclose(weights, destationary_softmax(logits, keep, tau, 0.0), atol=1e-4)


def test_nstransformer_encoder_reads_the_stationarised_series_and_its_output_is_destationarised():
    """The stack's input is ``(X − μ) / σ`` plus positions, the model's output ``σ ⊙ H + μ``,
    with μ, σ the prefix statistics of the embedded history."""
    net = nstransformer()
    items, ratings = rated_windows()
    factors, stack = Captured(net.factors), Captured(net.stack)
    with torch.no_grad():
        out = net(items, ratings)
    source, valid, mean, std, _ = factors.args
    expected_mean, expected_std = window_statistics(source, valid, prefix=True)
    torch.testing.assert_close(mean, expected_mean, atol=1e-12, rtol=0)
    torch.testing.assert_close(std, expected_std, atol=1e-12, rtol=0)
    keep = valid.unsqueeze(-1).double()
    positions = net.position.weight[net.config.max_len - items.shape[1] :]
    stationary = ((source - mean) / std + positions) * keep
    torch.testing.assert_close(stack.args[0], stationary, atol=1e-12, rtol=0)
    torch.testing.assert_close(out, (stack.out * std + mean) * keep, atol=1e-12, rtol=0)
    assert not torch.allclose(out, stack.out)


def test_nstransformer_reads_each_events_previous_rating_never_its_own():
    """The rating of event t is an input from event t + 1 on (the previous event's rating),
    never at t, whose label it is: changing it leaves every state up to t alone and moves the
    next one."""
    model = nstransformer()
    items, ratings = rated_windows()
    with torch.no_grad():
        base = model(items, ratings)
        for t in (5, 8):
            changed = ratings.clone()
            changed[:, t] = ratings[:, t] % 5 + 1
            moved = (model(items, changed) - base).abs().amax(-1)
            assert torch.all(moved[:, : t + 1] < 1e-12) and torch.all(moved[:, t + 1] > 1e-6)


def test_nstransformer_pointwise_head_labels_each_candidate_by_its_rating():
    """Position t's logit is ``w·H_t + b + b_item[item_t]``, trained by BCE against
    ``rating_t ≥ 4``: ratings 4 and 5 of the last candidate are the same label, 3 is the
    other one and moves the loss by exactly its logit over the labelled positions."""
    net = nstransformer()
    items, ratings = rated_windows()

    def loss(last_rating: float) -> torch.Tensor:
        changed = ratings.clone()
        changed[:, -1] = last_rating
        return net.auxiliary_losses(["pointwise"], items, net(items, changed), changed)["pointwise"]

    with torch.no_grad():
        hidden = net(items, ratings)
        logits = net.pointwise_logits(items, hidden)
        assert torch.equal(loss(4.0), loss(5.0))
        torch.testing.assert_close(
            loss(3.0) - loss(5.0), logits[:, -1].sum() / (items != 0).sum(), atol=1e-12, rtol=0
        )
        candidate = items[0, -1]
        net.items.bias[candidate] += 1.0
        moved = net.pointwise_logits(items, net(items, ratings))
    torch.testing.assert_close(moved - logits, (items == candidate).double(), atol=1e-12, rtol=0)


# -- SMM -------------------------------------------------------------------------------------------


def smm(**overrides):
    torch.manual_seed(0)
    options = {**TINY, "num_blocks": 2, "max_len": 8, **overrides}
    return build_model("smm", 12, **options).double().eval()


PREFIXES = torch.tensor([[3, 4, 5, 6, 7, 8], [0, 0, 9, 2, 11, 1]])


def reversed_prefixes(window: torch.Tensor) -> torch.Tensor:
    """Each row's items before the mask token in reverse order, padding kept on the left."""
    out = window.clone()
    for row in range(len(window)):
        real = torch.nonzero(window[row, :-1]).flatten()
        out[row, real] = window[row, real.flip(0)]
    return out


def test_smm_encoder_is_bidirectional_within_the_prefix():
    """Every item's state reads the items after it, and without positions the mask token's
    state is a function of the prefix's item set, whatever its order: a bidirectional
    encoder's, which a causal mask is not."""
    model = smm()
    window = model.scoring_input(PREFIXES)
    assert torch.equal(window[:, -1], torch.full((2,), model.mask_token))
    changed = window.clone()
    changed[:, -2] = changed[:, -2] % 12 + 1  # the last item before the mask
    with torch.no_grad():
        hidden, changed_hidden = model(window), model(changed)
    first = (window != 0).int().argmax(1)
    rows = torch.arange(2)
    assert (hidden[rows, first] - changed_hidden[rows, first]).abs().amax(-1).min() > 1e-6
    unordered = smm(position="none")
    with torch.no_grad():
        forward = unordered(window)[:, -1]
        backward = unordered(reversed_prefixes(window))[:, -1]
    torch.testing.assert_close(backward, forward, atol=1e-10, rtol=0)


def test_smm_cope_counts_positions_from_the_content_in_every_layer():
    """Without learned positions, CoPE alone makes the mask token's state depend on the
    prefix's order; its tables start at zero and every layer's gets a training signal."""
    model = smm(position="none", cope=True)
    tables = [attention.cope.embedding for attention in model.attention_modules()]
    assert len(tables) == 2
    window = model.scoring_input(PREFIXES)
    model.train()
    F.cross_entropy(model.logits(model(window)[:, -1]), torch.tensor([9, 10])).backward()
    assert all(table.grad.abs().sum() > 0 for table in tables)
    model.eval()
    with torch.no_grad():
        generator = torch.Generator().manual_seed(1)
        for table in tables:
            table.copy_(torch.randn(table.shape, generator=generator, dtype=torch.float64))
        forward = model(window)[:, -1]
        backward = model(reversed_prefixes(window))[:, -1]
    assert (forward - backward).abs().amax(-1).min() > 1e-6


def cope_by_hand(attention, query_input: torch.Tensor, key_input: torch.Tensor, keep):
    """CoPE's attention weights (B, H, L, L) by loops: logits ``z_ij = q_i·k_j / √d_h``, gates
    ``σ(z_im)`` summed over the kept keys m ≥ j into ``p_ij`` (at most the table's last row),
    the logit gaining ``q_i·e(p_ij)`` with e interpolated between the table's integer rows."""
    q, k, _ = attention._project(query_input, key_input)
    table = attention.cope.embedding  # (d_h, positions)
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    batch, heads, length, _ = logits.shape
    out = torch.empty_like(logits)
    for b, h, i in np.ndindex(batch, heads, length):
        row = logits[b, h, i]
        kept = keep[b, 0, i]
        gates = torch.sigmoid(row) * kept
        for j in range(length):
            position = min(float(gates[j:].sum()), table.shape[1] - 1.0)
            low, high = math.floor(position), math.ceil(position)
            share = position - low
            e = (1 - share) * table[:, low] + share * table[:, high]
            out[b, h, i, j] = row[j] + q[b, h, i] @ e
    return out.masked_fill(~keep, float("-inf")).softmax(-1)


def test_smm_cope_attention_is_the_contextual_position_formula_written_out():
    """Every layer's attention weights equal CoPE's formula from its own weights: positions
    counted from the gates of the keys from j to the end, interpolated between integer rows."""
    model = smm(position="none", cope=True, cope_positions=4)
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for attention in model.attention_modules():
            attention.cope.embedding.copy_(torch.randn(8, 4, generator=generator))
        window = model.scoring_input(PREFIXES)
        with record_attention(model) as recorder:
            model(window)
        keep = attention_mask(window != 0, causal=False)
        for attention, inputs, weights in zip(
            model.attention_modules(), recorder.layer_inputs, recorder.attention, strict=True
        ):
            expected = cope_by_hand(attention, inputs.query, inputs.key, keep)
            real = (window != 0)[:, None, :, None]
            torch.testing.assert_close(weights * real, expected * real, **EXACT)


def test_smm_scores_the_next_item_by_the_masked_lm_head_at_the_mask_token():
    """BERT's masked-LM transform ``LN(GELU(W h + b))`` over the encoder's states, and the
    mask token appended after the prefix is where the next item is read."""
    model = smm()
    window = model.scoring_input(PREFIXES)
    valid = window != 0
    dense, activation, norm = model.head
    with torch.no_grad():
        encoded = model.encoder(model.embed(window), valid)
        expected = norm(activation(dense(encoded))) * valid[..., None]
        torch.testing.assert_close(model(window), expected, **EXACT)
        assert (expected - encoded).abs().max() > 1e-3
        last = model.logits(model(window)[:, -1])
        torch.testing.assert_close(model.score_last(PREFIXES), last, **EXACT)


# -- ADT -------------------------------------------------------------------------------------------


def adt(**overrides):
    torch.manual_seed(0)
    options = {**TINY, "num_blocks": 2, "max_len": 8, **overrides}
    return build_model("adt", NUM_ITEMS, **options).double()


def adt_batch() -> torch.Tensor:
    seq = torch.randint(1, NUM_ITEMS + 1, (4, 8), generator=torch.Generator().manual_seed(0))
    seq[1, :3] = 0
    seq[2, :5] = 0
    return seq


def test_adt_lambda_weights_each_layers_terms_in_the_training_step(walks, monkeypatch):
    """The trainer's loss is ``main + Σ_l λ1_l reconstruction_l + λ2_l independence_l``: each
    term passes back exactly its own layer's λ."""
    weights = {"reconstruction_weights": "0.1,0.2", "independence_weights": "0.3,0.4"}
    config = run_config(walks, "adt", num_blocks=2, **weights)
    split = load_split(config.data)
    loop = TrainingLoop(config, split, build(config, split.num_items), distributed.Context())
    steps = FirstSteps(monkeypatch, ADT)
    loop.train_step(np.arange(32), loop.begin_epoch(1))
    expected = {"reconstruction_1": 0.1, "reconstruction_2": 0.2}
    expected |= {"independence_1": 0.3, "independence_2": 0.4}
    assert steps.runs[0]["term_grads"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("layer", [0, 1])
def test_adt_head_identification_reads_each_heads_output_before_w_o(layer):
    """Layer l's independence term is a function of its heads' outputs before W_O: its
    gradient reaches the layer's values and its own classifier, never its W_O, a later layer
    or another layer's classifier."""
    model = adt(independence_weights="1").train()
    data = adt_batch()
    name = f"independence_{layer + 1}"
    term = model.auxiliary_losses([name], data, model(data))[name]
    blocks, classifiers = model.encoder.blocks, model.disentangling["head_classifiers"]
    watched = {
        "values": blocks[layer].attention.v_proj.weight,
        "classifier": classifiers[layer].weight,
        "w_o": blocks[layer].attention.out_proj.weight,
        "other classifier": classifiers[1 - layer].weight,
        **{f"later.{n}": p for block in blocks[layer + 1 :] for n, p in block.named_parameters()},
    }
    grads = torch.autograd.grad(term, list(watched.values()), allow_unused=True)
    reached = {
        name: grad is not None and bool(grad.abs().sum() > 0)
        for name, grad in zip(watched, grads, strict=True)
    }
    assert reached.pop("values") and reached.pop("classifier")
    assert not any(reached.values()), reached


def test_adt_reconstruction_decoder_is_causal():
    """Decoder position t reads the items before t (teacher forcing) and the encoder's states
    up to t: changing the items after t leaves every layer's output up to t alone."""
    model = adt().eval()
    data = adt_batch()
    with torch.no_grad():
        decoded = model.decode(data, model(data))
        for t in (4, 6):
            changed = data.clone()
            changed[:, t + 1 :] = changed[:, t + 1 :] % NUM_ITEMS + 1
            again = model.decode(changed, model(changed))
            for layer, layer_again in zip(decoded, again, strict=True):
                torch.testing.assert_close(
                    layer_again[:, : t + 1], layer[:, : t + 1], atol=1e-12, rtol=0
                )
                assert not torch.allclose(layer_again[:, t + 1 :], layer[:, t + 1 :])


def decoder_by_hand(model, item_seq: torch.Tensor, encoded: torch.Tensor) -> list[torch.Tensor]:
    """The official ``DecoderLayer`` stack through torch's own ``nn.MultiheadAttention``: the
    items shifted right by one, each layer ``d = LN(x)``, causal self-attention on ``d``, causal
    cross-attention of that on the encoder's output, ``x = d + c + FFN(c)``, zero where the
    shifted input is padding; rows without padding, so every query has a key."""
    shifted = torch.cat([torch.zeros_like(item_seq[:, :1]), item_seq[:, :-1]], dim=1)
    length = item_seq.shape[1]
    later = torch.ones(length, length, dtype=torch.bool).triu(1)  # True: not attended
    own_keys = later | (shifted == 0)[:, None, :]
    own_keys = own_keys & ~torch.eye(length, dtype=torch.bool)  # a padding query reads itself
    heads = model.config.num_heads
    x, outputs = model.embed(shifted), []
    for layer in model.disentangling["decoder"]:
        normed = layer.norm(x)
        mask = own_keys.repeat_interleave(heads, dim=0)
        attended = layer.self_attention(normed, normed, normed, attn_mask=mask)[0]
        crossed = layer.cross_attention(attended, encoded, encoded, attn_mask=later)[0]
        x = (normed + crossed + layer.ffn(crossed)) * (shifted != 0)[..., None]
        outputs.append(x)
    return outputs


def test_adt_terms_are_each_layers_reconstruction_and_head_identification_written_out():
    """Layer l's terms, from the model's own weights: the MSE between the input of encoder
    layer l and the output of decoder layer L − 1 − l (a decoder fed the items shifted right by
    one), and the mean over heads of −log p(h | o_h) from layer l's classifier; both summed
    over positions and divided by the window (the official element-wise means); the item
    table's Frobenius norm, not squared."""
    model = adt(reconstruction_weights="1", independence_weights="1", embedding_norm_weight=1.0)
    model.train()  # every dropout is 0: the training forward is deterministic
    data = torch.randint(1, NUM_ITEMS + 1, (4, 8), generator=torch.Generator().manual_seed(2))
    names = [name for name in model.auxiliary_weights() if name != "embedding_norm"]
    terms = model.auxiliary_losses([*names, "embedding_norm"], data, model(data))
    inputs, heads = [], []
    blocks = model.encoder.blocks
    hooks = [b.register_forward_pre_hook(lambda _, a: inputs.append(a[0])) for b in blocks]
    hooks += [
        b.attention.out_proj.register_forward_pre_hook(lambda _, a: heads.append(a[0]))
        for b in blocks
    ]
    with torch.no_grad():
        encoded = model.eval()(data)
    for hook in hooks:
        hook.remove()
    decoded = decoder_by_hand(model, data, encoded)
    window = len(data) * model.config.max_len
    count = model.config.num_heads
    for layer in range(2):
        rebuilt = ((inputs[layer] - decoded[1 - layer]) ** 2).mean(-1).sum() / window
        classifier = model.disentangling["head_classifiers"][layer]
        per_head = heads[layer].unflatten(-1, (count, -1))  # (B, L, H, d/H)
        log_p = F.log_softmax(classifier(per_head), dim=-1)  # (B, L, H, H)
        nll = -torch.stack([log_p[..., h, h] for h in range(count)], -1).mean(-1).sum() / window
        torch.testing.assert_close(terms[f"reconstruction_{layer + 1}"], rebuilt, **EXACT)
        torch.testing.assert_close(terms[f"independence_{layer + 1}"], nll, **EXACT)
    table = model.items.input.weight
    torch.testing.assert_close(terms["embedding_norm"], (table**2).sum().sqrt(), **EXACT)


# -- staged recipes: BiCAT and MrTransformer -------------------------------------------------------

RECIPE = [
    "model.hidden_size=16",
    "model.ffn_size=16",
    "model.num_heads=2",
    "data.max_len=12",
    "train.epochs=2",
    "train.batch_size=32",
    "eval.ks=1,10",
    "eval.batch_size=64",
]


def external(run_dir: Path, items: torch.Tensor) -> np.ndarray:
    """A run's internal item ids → the walks' external ids (0 stays padding)."""
    ids = json.loads((run_dir / "id_maps.json").read_text())["items"]
    return np.array([0, *map(int, ids[1:])])[items.numpy()]


def after(items: np.ndarray) -> np.ndarray:
    """Each walk item's successor."""
    return (items - 1 + STEP) % NUM_ITEMS + 1


@pytest.fixture(scope="module")
def bicat_recipe(tmp_path_factory, single_thread):
    folder = tmp_path_factory.mktemp("bicat")
    data = write_walks(folder / "walks.txt")
    with pytest.MonkeyPatch.context() as monkeypatch:
        steps = FirstSteps(monkeypatch, BiCAT)
        generated_by = []
        write_generation = generate.write_generation

        def recorded(model, *args, **kwargs):
            generated_by.append(clone_state(model))
            return write_generation(model, *args, **kwargs)

        monkeypatch.setattr(generate, "write_generation", recorded)
        settings = [*RECIPE, "finetune:eval.sampled_negatives=10"]  # 100 > the catalogue
        run_recipe("bicat", folder / "run", str(data), None, settings, show_progress=False)
    return folder / "run", steps.runs, generated_by


def test_bicat_recipe_pretrains_on_reversed_rows_with_a_chronological_forward_term(bicat_recipe):
    """Stage 1's main loss predicts each item's predecessor (rows newest first); its ``source``
    stream, which the forward term reads, runs forward; the term is weighted by λ = 0.4."""
    out, runs, _ = bicat_recipe
    assert len(runs) == 2  # pre-training and fine-tuning
    pretrain, stage = runs[0], out / "1-pretrain"
    step = pretrain["step"]
    inputs = external(stage, step.inputs[step.mask])
    targets = external(stage, step.targets[step.mask])
    np.testing.assert_array_equal(after(targets), inputs)
    source = external(stage, pretrain["streams"]["source"])
    pairs = (source[:, :-1] != 0) & (source[:, 1:] != 0)
    assert pairs.sum() > 0
    np.testing.assert_array_equal(after(source[:, :-1][pairs]), source[:, 1:][pairs])
    assert pretrain["term_grads"] == pytest.approx({"forward": 0.4}, rel=1e-5)


def test_bicat_recipe_fine_tunes_forward_on_prefixed_rows_with_the_symmetric_kl(bicat_recipe):
    """Stage 3 reads chronological rows lengthened by the generated items, each window's last
    target the original row's, and adds the KL to the original row, weighted by α = 1."""
    out, runs, _ = bicat_recipe
    finetune, stage = runs[1], out / "3-finetune"
    step, source = finetune["step"], finetune["streams"]["source"]
    last_inputs = external(stage, step.inputs[:, -1])
    np.testing.assert_array_equal(after(last_inputs), external(stage, step.targets[:, -1]))
    np.testing.assert_array_equal(step.targets[:, -1].numpy(), source[:, -1].numpy())
    assert ((step.inputs != 0).sum(1) > (source[:, :-1] != 0).sum(1)).any()
    assert finetune["term_grads"] == pytest.approx({"kl": 1.0}, rel=1e-5)


def test_bicat_recipe_each_stage_starts_from_the_pretrained_weights_bit_for_bit(bicat_recipe):
    out, runs, generated_by = bicat_recipe
    pretrained = read_weights(out / "1-pretrain" / "model.safetensors")
    assert not same_weights(runs[0]["state"], pretrained)  # stage 1 trained
    assert len(generated_by) == 1 and same_weights(generated_by[0], pretrained)
    assert same_weights(runs[1]["state"], pretrained)


def test_bicat_terms_are_the_chronological_bce_and_the_symmetric_kl_written_out():
    """``forward``: the official unhalved BCE of each chronological position predicting the
    next item against a uniform negative, ``softplus(−h·e⁺) + softplus(h·e⁻)``; ``kl``:
    ½[KL(p‖q) + KL(q‖p)] of the softmax over the hidden units of the augmented row (p) and of
    the original one (q), right-aligned, averaged over the units; both summed over the real
    positions and divided by the window."""
    torch.manual_seed(0)
    options = {**TINY, "max_len": 8, "forward_weight": 1.0, "kl_weight": 1.0}
    model = build_model("bicat", NUM_ITEMS, **options).double().train()
    generator = torch.Generator().manual_seed(3)
    source = torch.randint(1, NUM_ITEMS + 1, (3, 9), generator=generator)
    source[1, :4] = 0
    augmented = source[:, :-1].clone()
    augmented[1, 2:4] = torch.tensor([7, 8])  # two synthetic items before row 1's history
    hidden = model(augmented)
    torch.manual_seed(11)
    terms = model.auxiliary_losses(["forward", "kl"], augmented, hidden, source=source)
    window = 3 * 8
    inputs, targets = source[:, :-1], source[:, 1:]
    with torch.no_grad():
        chronological = model(inputs)
    torch.manual_seed(11)
    negatives = torch.randint(1, NUM_ITEMS + 1, targets.shape)
    table = model.items.input.weight
    bce = F.softplus(-(chronological * table[targets]).sum(-1))
    bce = bce + F.softplus((chronological * table[negatives]).sum(-1))
    expected = (bce * (inputs != 0)).sum() / window
    torch.testing.assert_close(terms["forward"], expected, **EXACT)
    p, q = hidden.softmax(-1), model(source[:, :-1]).softmax(-1)
    symmetric = 0.5 * ((p * (p / q).log()).sum(-1) + (q * (q / p).log()).sum(-1))
    expected = (symmetric / hidden.shape[-1] * (augmented != 0)).sum() / window
    torch.testing.assert_close(terms["kl"], expected, **EXACT)


@pytest.fixture(scope="module")
def mrtransformer_recipe(tmp_path_factory, single_thread):
    folder = tmp_path_factory.mktemp("mr")
    data = write_walks(folder / "walks.txt")
    settings = [*RECIPE, "train.warmup_steps=0", "model.pair_neighbours=4", "train.batch_size=64"]
    with pytest.MonkeyPatch.context() as monkeypatch:
        steps = FirstSteps(monkeypatch, MrTransformer)
        run_recipe("mrtransformer", folder / "run", str(data), None, settings, show_progress=False)
    return folder / "run", steps.runs


def test_mrtransformer_recipe_pretrains_on_the_swap_with_neighbouring_prefixes(
    mrtransformer_recipe,
):
    """Pre-training's whole signal is the swap term (λ = 1, no main loss) between each prefix
    and a neighbour; fine-tuning's auxiliary term is the coverage (λ = 1)."""
    _, runs = mrtransformer_recipe
    pretrain, finetune = runs
    assert pretrain["term_grads"] == pytest.approx({"swap": 1.0}, rel=1e-5)
    streams = pretrain["streams"]
    assert not torch.equal(streams["partner"], streams["source"])
    assert finetune["term_grads"] == pytest.approx({"coverage": 1.0}, rel=1e-5)


def test_mrtransformer_recipe_finetune_starts_from_the_pretrained_weights_bit_for_bit(
    mrtransformer_recipe,
):
    out, runs = mrtransformer_recipe
    pretrained = read_weights(out / "1-pretrain" / "model.safetensors")
    assert not same_weights(runs[0]["state"], pretrained)
    assert same_weights(runs[1]["state"], pretrained)


# -- MrTransformer's mechanism ---------------------------------------------------------------------


def mrtransformer(**overrides):
    torch.manual_seed(0)
    options = {**TINY, "max_len": 8, **overrides}
    return build_model("mrtransformer", NUM_ITEMS, **options).double()


def unmatched(p: torch.Tensor, w_self: torch.Tensor, w_cross: torch.Tensor, other: torch.Tensor):
    """``p`` moved along directions the matching scores ``M`` cannot see: orthogonal to
    ``w_self`` and to every ``w_cross ⊙ other_k`` (per sequence)."""
    generator = torch.Generator().manual_seed(3)
    moved = p.clone()
    for row in range(len(p)):
        seen = torch.cat([w_self[None], w_cross[None] * other[row]])
        _, _, vh = torch.linalg.svd(seen)
        blind = vh[len(seen) :]  # the null space of every score's linear form
        moved[row] += torch.randn(p.shape[1], len(blind), generator=generator).double() @ blind
    return moved


def test_mrtransformer_swap_rebuilds_each_sequence_from_the_others_common_preferences():
    """``P̃_x = W_x[C_y; U_x; C_y ⊙ U_x]`` with ``C_y = softmax_row(M) P_y``: moving y's
    preferences where the matching M cannot see them leaves x's own common and unique parts
    alone and changes P̃_x, through C_y only, and the other way round for P̃_y."""
    swap = mrtransformer().swap
    generator = torch.Generator().manual_seed(0)
    p_x, p_y = torch.randn(2, 2, 3, 16, generator=generator).double()
    w_x, w_y, w_xy = swap.match.weight[0].detach().chunk(3)
    with torch.no_grad():
        common_x, common_y, swapped_x, swapped_y = swap(p_x, p_y)
        moved_y = swap(p_x, unmatched(p_y, w_y, w_xy, p_x))
        moved_x = swap(unmatched(p_x, w_x, w_xy, p_y), p_y)
    torch.testing.assert_close(moved_y[0], common_x, atol=1e-10, rtol=0)  # M unchanged
    assert (moved_y[2] - swapped_x).abs().amax(-1).min() > 1e-6
    torch.testing.assert_close(moved_x[1], common_y, atol=1e-10, rtol=0)
    assert (moved_x[3] - swapped_y).abs().amax(-1).min() > 1e-6


def test_mrtransformer_swap_term_encodes_the_partner_sequence():
    """The pre-training term reads the partner's items, not only its target."""
    model = mrtransformer(swap_weight=1.0).train()
    data = adt_batch()
    source = torch.cat([data, data[:, -1:]], 1)
    partner = torch.cat([data.flip(0), data[:, -1:]], 1)
    other = partner.clone()
    other[:, :-1] = partner[:, :-1].roll(1, dims=1) * (partner[:, :-1] != 0)
    with torch.no_grad():
        preferences = model.encode(data)[1]
        term = model.swap_term(preferences, source, partner)
        assert not torch.allclose(term, model.swap_term(preferences, source, other))


def coverage_by_hand(attention: torch.Tensor) -> torch.Tensor:
    """``Σ_k Σ_i min(a_{k,i}, Σ_{k' < k} a_{k',i})``, averaged over the batch, by loops."""
    batch, count, length = attention.shape
    total = attention.new_zeros(())
    for b in range(batch):
        for k in range(count):
            before = sum((attention[b, j] for j in range(k)), attention.new_zeros(length))
            total = total + torch.minimum(attention[b, k], before).sum()
    return total / batch


def test_mrtransformer_swap_term_is_the_common_mse_and_the_swapped_predictions():
    """``common_weight · [MSE(C_x, C_y) + MSE(P̃_x, P_x) + MSE(P̃_y, P_y)] + swap_prediction_weight
    · [CE(P̃_x → x's target) + CE(P̃_y → y's target)]``, each prediction the readout of the summed
    preferences scored against the item table and bias, P_y the partner's own encoding."""
    model = mrtransformer(swap_weight=1.0, common_weight=3.0, swap_prediction_weight=0.5).eval()
    data = adt_batch()
    source = torch.cat([data, data[:, -1:] % NUM_ITEMS + 1], 1)
    partner = torch.cat([data.flip(0), data.flip(0)[:, -1:] % NUM_ITEMS + 1], 1)
    with torch.no_grad():
        p_x, p_y = model.encode(data)[1], model.encode(partner[:, :-1])[1]
        term = model.swap_term(p_x, source, partner)
        common_x, common_y, swapped_x, swapped_y = model.swap(p_x, p_y)

        def predicted(preferences: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            table = model.items.input.weight[1 : NUM_ITEMS + 1]  # items, not preference tokens
            logits = model.readout(preferences.sum(1)) @ table.T + model.items.bias[1:]
            return F.cross_entropy(logits, target - 1)

        common = sum(
            ((a - b) ** 2).mean()
            for a, b in ((common_x, common_y), (swapped_x, p_x), (swapped_y, p_y))
        )
        prediction = predicted(swapped_x, source[:, -1]) + predicted(swapped_y, partner[:, -1])
    torch.testing.assert_close(term, 3.0 * common + 0.5 * prediction, **EXACT)


def test_mrtransformer_items_read_items_and_preference_tokens_read_everything():
    """In the encoder an item token attends the items alone and a preference token every real
    token: a preference token's embedding moves the preferences, never an item's state."""
    model = mrtransformer().eval()
    data = adt_batch()
    with torch.no_grad():
        items, preferences, _ = model.encode(data)
        model.items.input.weight[model.preference_ids[1]] *= -2.0  # LN ignores a shift
        moved_items, moved_preferences, _ = model.encode(data)
    torch.testing.assert_close(moved_items, items, atol=1e-12, rtol=0)
    assert (moved_preferences - preferences).abs().amax(-1).min() > 1e-6


def test_mrtransformer_coverage_is_taken_over_the_identification_attention():
    """The coverage term is the coverage of where the K preference tokens look (``a``), and
    its gradient trains the identification attention's queries and keys."""
    model = mrtransformer(coverage_weight=1.0).train()
    data = adt_batch()
    term = model.auxiliary_losses(["coverage"], data, model(data))["coverage"]
    attention = model.preference_attention(data)
    torch.testing.assert_close(term, coverage_by_hand(attention), atol=1e-12, rtol=0)
    term.backward()
    assert model.identify.q_proj.weight.grad.abs().sum() > 0
    assert model.identify.k_proj.weight.grad.abs().sum() > 0


# -- CRR -------------------------------------------------------------------------------------------

CRR_TINY = {**TINY, "num_blocks": 1}


@pytest.fixture(scope="module")
def crr_run(tmp_path_factory, single_thread):
    """Stage 1 (SASRec+ on rated data) and one epoch of stage 2 from it; the actor, critics and
    targets as the first two CRR steps read them."""
    folder = tmp_path_factory.mktemp("crr")
    data = write_rated(folder / "ratings.csv")
    config = RunConfig(
        model=ModelChoice("sasrec+", CRR_TINY),
        data=DataConfig(dataset=str(data), max_len=8),
        train=TrainConfig(epochs=2, batch_size=16, lr=1e-2),
        eval=EvalConfig(ks=(1, 10)),
    )
    stage1 = train(config, folder / "stage1", show_progress=False).run_dir
    calls = []
    losses = crr_trainer.crr_losses

    def recorded(networks, target, *args, **kwargs):
        if len(calls) < 2:
            calls.append(
                {
                    "networks": clone_state(networks),
                    "target": clone_state(target),
                    "parameters": {n: p.detach().clone() for n, p in networks.named_parameters()},
                    "target_parameters": {n: p.clone() for n, p in target.named_parameters()},
                }
            )
        return losses(networks, target, *args, **kwargs)

    stage2 = crr_trainer.crr_run_config(stage1, {"epochs": 1, "batch_size": 16, "lr": 1e-2})
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(crr_trainer, "crr_losses", recorded)
        crr = CRRConfig(critic="separate", tau=0.5)
        crr_trainer.train_crr(stage2, crr, folder / "crr", log=lambda _: None)
    return stage1, calls, crr


def test_crr_stage_two_starts_from_stage_ones_weights_bit_for_bit(crr_run):
    """At its first step the actor, each critic's encoder and their target copies are stage
    1's saved weights, to the bit."""
    stage1, calls, _ = crr_run
    saved = read_weights(stage1 / "model.safetensors")
    first = calls[0]
    for prefix in ("actor.", "critics.0.encoder.", "critics.1.encoder."):
        for state in (first["networks"], first["target"]):
            part = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            assert same_weights(part, saved), prefix
    torch.manual_seed(0)
    fresh = build_model("sasrec+", int(saved["items.input.weight"].shape[0]) - 1, **CRR_TINY)
    assert not same_weights(clone_state(fresh), saved)


def test_crr_target_networks_follow_the_online_ones_by_polyak_averaging(crr_run):
    """After one step the targets moved a τ of the way to the updated actor and critics:
    neither still the step-0 copy nor the online networks themselves."""
    _, calls, crr = crr_run
    before, after_step = calls
    for name, target in after_step["target_parameters"].items():
        start, online = before["target_parameters"][name], after_step["parameters"][name]
        expected = torch.lerp(start, online, crr.tau)
        torch.testing.assert_close(target, expected, rtol=1e-6, atol=1e-7)
    moved = [
        n
        for n, p in after_step["parameters"].items()
        if not torch.equal(p, before["parameters"][n])
    ]
    assert moved
    for name in moved:
        target = after_step["target_parameters"][name]
        assert not torch.equal(target, after_step["parameters"][name]), name


def crr_setup(critic_biases, config: CRRConfig):
    """An actor and twin critics whose Q-values are their biases ``critic_biases`` (one per
    critic, (num_items + 1,)), on windows with ratings."""
    torch.manual_seed(0)
    actor = build_model("sasrec+", NUM_ITEMS, **CRR_TINY, max_len=6).double()
    networks = Networks(actor, config).double()
    with torch.no_grad():
        for critic, bias in zip(networks.critics, critic_biases, strict=True):
            critic.weight.zero_()
            critic.bias.copy_(bias)
    inputs = torch.tensor([[0, 0, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [0, 0, 0, 1, 2, 9]])
    ratings = torch.tensor([[0, 0, 1, 2, 3, 4], [5, 4, 3, 2, 1, 5], [0, 0, 0, 3, 4, 1.0]])
    return networks, inputs, ratings


@pytest.mark.parametrize("reward", ["liked", "centered"])
def test_crr_td_target_bootstraps_from_the_smaller_target_critic(reward):
    """``y = r + γ (1 − done) min_k Σ_a π Q̄_k(s', a)``: the target copies' values (2 and 1
    here), not the online critics' (5), and the smaller of the twins; r is 1 for a liked
    rating (≥ 4) or the rating less the middle of the data's scale (3 on 1–5)."""
    config = CRRConfig(gamma=0.5, reward=reward, critic="shared")
    online, inputs, ratings = crr_setup([torch.full((NUM_ITEMS + 1,), 5.0)] * 2, config)
    target = target_copy(online)
    with torch.no_grad():
        target.critics[0].bias.fill_(2.0)
        target.critics[1].bias.fill_(1.0)
    critic_loss, _, stats = crr_losses(online, target, inputs, ratings, config, (1.0, 5.0), False)
    step = transitions(inputs, ratings)
    reward = (step.ratings >= 4).double() if reward == "liked" else step.ratings - 3.0
    td_target = reward + 0.5 * (1 - step.done) * 1.0
    # rewards are float32 (the trainer's dtype): agreement to its precision
    assert stats["td_target_mean"] == pytest.approx(float(td_target.mean()), abs=1e-6)
    expected = 2 * float(((5.0 - td_target) ** 2).mean())
    assert critic_loss.item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("weight", ["binary", "exp"])
def test_crr_actor_loss_weights_each_logged_action_by_its_advantage(weight):
    """``L_π = −mean f(A) log π(a|s)``, ``A = Q_1(s, a) − Σ_a' π(a'|s) Q_1(s, a')`` from the
    first critic: here Q_1 is 1 on even items, 0 elsewhere, and the second critic (all 0,
    whose advantages would all be 0) is not the one read."""
    config = CRRConfig(weight=weight, beta=0.5, critic="shared")
    even = (torch.arange(NUM_ITEMS + 1) % 2 == 0).double()
    networks, inputs, ratings = crr_setup([even, torch.zeros(NUM_ITEMS + 1)], config)
    target = target_copy(networks)
    _, loss, stats = crr_losses(networks, target, inputs, ratings, config, (1.0, 5.0), True)
    step = transitions(inputs, ratings)
    with torch.no_grad():
        log_pi = networks.actor.logits(networks.actor(inputs)[step.here]).log_softmax(-1)
        advantage = even[step.actions] - (log_pi.exp() * even).sum(-1)
    assert (advantage > 0).any() and (advantage < 0).any()
    weights = (advantage > 0).double() if weight == "binary" else torch.exp(advantage / 0.5)
    expected = -(weights * log_pi.gather(1, step.actions[:, None])[:, 0]).mean()
    torch.testing.assert_close(loss, expected, atol=1e-12, rtol=0)
    assert stats["advantage_mean"] == pytest.approx(float(advantage.mean()), abs=1e-12)
    # the weights are constants of the actor's step: its loss trains no critic
    biases = [critic.bias for critic in networks.critics]
    grads = torch.autograd.grad(loss, biases, allow_unused=True)
    assert all(grad is None or not grad.any() for grad in grads)


# -- the PI-Transformer and the stream runner's replay ---------------------------------------------


def prequential(clicks: Path, *settings: str) -> stream_runner.Prequential:
    base = [f"data.dataset={clicks}", "stream.chunk_size=16", "stream.history=4"]
    model = ["model.hidden_size=16", "model.ffn_size=16", "model.context_blocks=1"]
    config = StreamConfig(model="pi-transformer").with_settings([*base, *model, *settings])
    return stream_runner.Prequential(config, load_stream(config.data.dataset))


class StateCalls:
    """Every ``chunk_states`` call of the runner: its labels and memory, and the memory it
    returned."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[dict] = []
        states = stream_runner.chunk_states

        def recorded(model, histories, labels, memory):
            hidden, returned = states(model, histories, labels, memory)
            self.calls.append({"labels": labels, "memory": memory, "returned": returned})
            return hidden, returned

        monkeypatch.setattr(stream_runner, "chunk_states", recorded)


def chunk_of(runner, labels: torch.Tensor) -> int:
    """The chunk whose events carry ``labels``."""
    found = [
        j for j, chunk in enumerate(runner.chunks) if torch.equal(runner.inputs(chunk)[1], labels)
    ]
    assert len(found) == 1
    return found[0]


def step_gradient(runner, model, chunks: list[tuple[int, list | None]]) -> tuple:
    """The gradient of the mean CE over the events of ``chunks`` ((chunk, memory) pairs)."""
    total, count = 0.0, 0
    for chunk, memory in chunks:
        histories, labels = runner.inputs(runner.chunks[chunk])
        hidden, _ = chunk_states(model, histories, labels, memory)
        total = total + F.cross_entropy(model.logits(hidden), labels, reduction="sum")
        count += labels.numel()
    return torch.autograd.grad(total / count, list(model.parameters()), allow_unused=True)


def test_stream_replay_joins_every_update_with_a_forward_moving_earlier_chunk(
    tmp_path, monkeypatch
):
    """With R replay streams each update after the first learns from its chunk and from R
    earlier ones, all events weighted alike: each stream starts at a chunk before the frontier
    with an empty memory and moves forward one chunk per update with its own memory."""
    clicks = write_clicks(tmp_path / "clicks.txt")
    exact = ["stream.grad_clip=0", "model.dropout=0", "model.attention_dropout=0"]
    runner = prequential(clicks, "stream.replay_streams=2", *exact)
    calls = StateCalls(monkeypatch)
    streams: list[list[tuple[int, dict]]] = [[], []]
    for index in range(5):
        runner.predict_chunk(index)
        before = copy.deepcopy(runner.model)
        start = len(calls.calls)
        runner.update_chunk(index)
        update = calls.calls[start:]
        assert len(update) == (3 if index else 1)
        read = [(chunk_of(runner, call["labels"]), call["memory"]) for call in update]
        assert read[0][0] == index
        for number, call in enumerate(update[1:]):
            streams[number].append((read[number + 1][0], call))
        expected = step_gradient(runner, before.train(), read)
        for parameter, grad in zip(runner.model.parameters(), expected, strict=True):
            if grad is None:
                assert parameter.grad is None or not parameter.grad.any()
            else:
                torch.testing.assert_close(parameter.grad, grad, rtol=1e-5, atol=1e-7)
    for stream in streams:
        (first, call), *rest = stream
        assert first < 1 and call["memory"] is None  # started before the frontier, from nothing
        previous = call
        for update, (chunk, call) in enumerate(rest, start=2):
            assert chunk == first + update - 1 < update
            assert call["memory"] is previous["returned"]
            previous = call


@pytest.mark.parametrize("memory", [True, False])
def test_pi_transformer_reads_each_chunks_labels_and_the_previous_chunks_memory(
    tmp_path, monkeypatch, memory
):
    """Each chunk is predicted and learned from with its own labels as privileged inputs and
    the labelled states its predecessor's prediction pass left (Transformer-XL memory)."""
    runner = prequential(
        write_clicks(tmp_path / "clicks.txt"), f"stream.memory={str(memory).lower()}"
    )
    calls = StateCalls(monkeypatch)
    for index in range(4):
        runner.predict_chunk(index)
        runner.update_chunk(index)
    predictions, updates = calls.calls[0::2], calls.calls[1::2]
    for index, (predicted, updated) in enumerate(zip(predictions, updates, strict=True)):
        labels = torch.from_numpy(runner.stream.item[runner.chunks[index]])
        assert torch.equal(predicted["labels"], labels) and torch.equal(updated["labels"], labels)
        remembered = predictions[index - 1]["returned"] if index and memory else None
        assert predicted["memory"] is remembered and updated["memory"] is remembered


def test_pi_transformer_event_t_reads_the_labels_before_it_and_the_memory_not_its_own():
    """Within a chunk, event t's state moves with the label of every earlier event and with
    nothing of its own or a later one (its label is what it predicts); the previous chunk's
    memory moves every state of the next."""
    torch.manual_seed(0)
    config = PITransformerConfig(**TINY, max_len=6)
    model = PITransformer(NUM_ITEMS, config).double().eval()
    generator = torch.Generator().manual_seed(4)
    histories = torch.randint(1, NUM_ITEMS + 1, (5, 6), generator=generator)
    labels = torch.randint(1, NUM_ITEMS + 1, (5,), generator=generator)
    with torch.no_grad():
        base, memory = model.stream_hidden(histories, labels)
        for j in range(5):
            changed = labels.clone()
            changed[j] = labels[j] % NUM_ITEMS + 1
            moved = (model.stream_hidden(histories, changed)[0] - base).abs().amax(-1)
            assert torch.all(moved[: j + 1] < 1e-12), (j, moved)
            assert torch.all(moved[j + 1 :] > 1e-9), (j, moved)
        remembered = model.stream_hidden(histories, labels, memory)[0]
    assert (remembered - base).abs().amax(-1).min() > 1e-9


# -- RLT4Rec ---------------------------------------------------------------------------------------


def rlt4rec(**overrides):
    torch.manual_seed(0)
    options = {**TINY, "hidden_size": 32, "ffn_size": 64, "max_len": 8, **overrides}
    return build_model("rlt4rec", NUM_ITEMS, **options).double().eval()


def episodes() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    items = torch.stack([torch.randperm(NUM_ITEMS, generator=generator)[:8] + 1 for _ in range(3)])
    ratings = torch.randint(1, 6, (3, 8), generator=generator).double()
    items[1, :3] = 0
    return items, ratings * (items != 0)


def test_rlt4rec_next_item_is_scored_from_the_rating_token_it_should_earn():
    """The episode loss scores item t from the state of its rating token r_t: that state reads
    r_t and everything before, never item t itself."""
    model = rlt4rec()
    scored = []

    def logits(states: torch.Tensor) -> torch.Tensor:
        scored.append(states)
        return RLT4Rec.logits(model, states)

    model.logits = logits
    items, ratings = episodes()
    column = torch.arange(8).expand(3, -1)[items != 0]

    def states(changed_items, changed_ratings) -> torch.Tensor:
        with torch.no_grad():
            model.episode_losses(changed_items, changed_ratings)
        return scored[-1]

    base, t = states(items, ratings), 5
    other_item, other_rating = items.clone(), ratings.clone()
    other_item[:, t] = items[:, t] % NUM_ITEMS + 1
    other_rating[:, t] = ratings[:, t] % 5 + 1
    with_item, with_rating = states(other_item, ratings), states(items, other_rating)
    torch.testing.assert_close(with_item[column <= t], base[column <= t], atol=1e-12, rtol=0)
    assert (with_item[column > t] - base[column > t]).abs().amax(-1).min() > 1e-6
    torch.testing.assert_close(with_rating[column < t], base[column < t], atol=1e-12, rtol=0)
    assert (with_rating[column == t] - base[column == t]).abs().amax(-1).min() > 1e-6


def test_rlt4rec_platform_forward_reads_the_next_items_logged_rating_not_the_item():
    """Under the platform's trainer position t predicts item t + 1 from the state of that item's
    rating token: it moves with the logged rating r_{t+1}, never with the item a_{t+1} it
    predicts, and nothing before t moves with either."""
    model = rlt4rec()
    items, ratings = episodes()
    with torch.no_grad():
        base = model(items, ratings)
        for t in (3, 5):
            other_rating, other_item = ratings.clone(), items.clone()
            other_rating[:, t + 1] = ratings[:, t + 1] % 5 + 1
            other_item[:, t + 1] = items[:, t + 1] % NUM_ITEMS + 1
            by_rating = (model(items, other_rating) - base).abs().amax(-1)
            by_item = (model(other_item, ratings) - base).abs().amax(-1)
            assert torch.all(by_rating[:, :t] < 1e-12) and torch.all(by_rating[:, t] > 1e-6)
            assert torch.all(by_item[:, : t + 1] < 1e-12) and torch.all(by_item[:, t + 1] > 1e-6)


def test_rlt4rec_rating_head_is_an_inner_product_with_the_next_items_embedding():
    """``r̃_2 = u · tanh(E[a_2])`` with u from the history alone: the predicted rating of the
    next item never reads that item's rating, and over every next item it is linear in
    tanh(E[a_2]) (D = 16 unknowns, 29 equations)."""
    model = rlt4rec(hidden_size=16, ffn_size=32)

    def error(next_item: int, rating: float) -> float:
        items = torch.tensor([[4, next_item]])
        with torch.no_grad():
            return model.episode_losses(items, torch.tensor([[5.0, rating]]))[1].item()

    candidates = [item for item in range(1, NUM_ITEMS + 1) if item != 4]
    predicted = []
    for item in candidates:
        value = (error(item, 0.0) - error(item, 1.0) + 1) / 2  # (r̃ − 0)² − (r̃ − 1)² = 2r̃ − 1
        assert error(item, 3.0) == pytest.approx((value - 3) ** 2, abs=1e-9)
        predicted.append(value)
    predicted = torch.tensor(predicted, dtype=torch.float64)
    table = torch.tanh(model.items.input.weight[candidates].detach())
    solution = torch.linalg.lstsq(table, predicted[:, None]).solution
    residual = (table @ solution)[:, 0] - predicted
    assert residual.norm() <= 1e-8 * predicted.norm()


def test_rlt4rec_episode_trainer_trains_the_action_ce_plus_the_weighted_rating_mse(
    tmp_path, monkeypatch
):
    """Each step of the episode trainer minimises ``CE(actions) + rating_loss_weight · MSE``:
    over two steps the terms pass back 1 + 1 and 0.5 + 0.5."""
    data = write_rated(tmp_path / "ratings.csv")
    simulator = fit_simulator(
        load_dataset(str(data)), FitSettings(groups=3, items=NUM_ITEMS), {"dataset": str(data)}
    )
    simulator.save(tmp_path / "sim")
    grads = {"actions": 0.0, "ratings": 0.0}
    losses = RLT4Rec.episode_losses

    def hooked(model, items, ratings):
        actions, rated = losses(model, items, ratings)
        actions.register_hook(gradient_adder(grads, "actions"))
        rated.register_hook(gradient_adder(grads, "ratings"))
        return actions, rated

    monkeypatch.setattr(RLT4Rec, "episode_losses", hooked)
    model = {**TINY, "hidden_size": 16, "rating_loss_weight": 0.5}
    schedule = TrainConfig(epochs=1, steps_per_epoch=2, batch_size=8, lr=5e-3)
    config = episode_run_config(simulator, model, schedule)
    settings = EpisodeSettings(steps=5, valid_users=1, test_users=1)
    train_rlt4rec(tmp_path / "sim", tmp_path / "run", config, settings, log=lambda _: None)
    assert grads == pytest.approx({"actions": 2.0, "ratings": 1.0}, rel=1e-9)


# -- SRT's warm start ------------------------------------------------------------------------------


def test_srt_warm_start_on_another_catalogue_starts_from_the_source_weights_bit_for_bit(
    tmp_path, monkeypatch
):
    """``train.init_from`` a run on another catalogue: SRT's weights hold no row per item, so
    every one of them loads, and the fine-tune's first step reads them unchanged."""
    first = write_catalogue(tmp_path / "first", 1, 0)
    second = write_catalogue(tmp_path / "second", 500, 3)
    options = {"num_buckets": 256, "token_size": 8}
    source = train(
        run_config(first, "srt", epochs=1, features_dataset=str(first), **options),
        tmp_path / "pre",
        show_progress=False,
    ).run_dir
    config = run_config(second, "srt", epochs=1, features_dataset=str(second), **options)
    config = dataclasses.replace(
        config, train=dataclasses.replace(config.train, init_from=str(source))
    )
    steps = FirstSteps(monkeypatch)
    train(config, tmp_path / "tuned", show_progress=False)
    saved = read_weights(source / "model.safetensors")
    assert same_weights(steps.runs[0]["state"], saved)
