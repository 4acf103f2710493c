"""ETRec, SDAT and SRT under the zoo's checks: they overfit tiny data, never read a later item
or their target, and read a padded window like its unpadded self."""

import numpy as np
import pytest
import torch
from zoo_helpers import MAX_LEN, NUM_ITEMS, SMALL, one_thread, overfit, run, tiny_sequences

from attnsvm.rec.data.batches import make_batch, make_examples
from attnsvm.rec.models import build_model

# ETRec's window and blocks smaller than MAX_LEN, so the chunked local attention and the block
# branch both run; SDAT with every part on
OVERRIDES = {
    "etrec": {"local_window": 2, "block_size": 3},
    "sdat": {},
    "srt": {"num_buckets": 4096, "token_size": 32},
}
NAMES = tuple(OVERRIDES)


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def features(tmp_path_factory) -> str:
    """A catalogue of NUM_ITEMS items (external id = internal id), each its own title word."""
    folder = tmp_path_factory.mktemp("catalogue")
    rows = [" ".join(map(str, [user, *range(1, NUM_ITEMS + 1)])) for user in (1, 2)]
    (folder / "walks.txt").write_text("\n".join(rows) + "\n")
    genres = ("Drama", "Comedy", "War")
    movies = [f"{i}::Film{i} part {i % 4} ({1990 + i})::{genres[i % 3]}" for i in range(1, 31)]
    (folder / "movies.dat").write_text("\n".join(movies) + "\n")
    return str(folder / "walks.txt")


def make(name: str, features: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    options = {**SMALL, **OVERRIDES[name], **overrides}
    if name == "srt":
        options["features_dataset"] = features
    return build_model(name, NUM_ITEMS, **options)


@pytest.mark.parametrize("name", NAMES)
def test_overfits_tiny_data(name: str, features: str) -> None:
    # SRT learns its item vectors through shared token embeddings and an adapter, not a table:
    # all of 5 seeds memorise by step 60, 3 of 5 by the zoo's 40
    steps = 80 if name == "srt" else 40
    assert overfit(make(name, features), tiny_sequences(), steps=steps) == 1.0


@pytest.mark.parametrize("name", NAMES)
def test_causal_training_never_reads_later_items(name: str, features: str) -> None:
    model = make(name, features, objective="causal") if name == "srt" else make(name, features)
    assert model.objective == "causal"
    model = model.double().eval()
    seq = torch.randint(1, NUM_ITEMS + 1, (3, MAX_LEN), generator=torch.Generator().manual_seed(0))
    seq[1, :3] = 0
    hidden = run(model, seq)  # SDAT's event times depend on the first column only
    for t in range(3, MAX_LEN - 1):
        changed = seq.clone()
        changed[:, t + 1 :] = torch.randint(1, NUM_ITEMS + 1, changed[:, t + 1 :].shape)
        later = run(model, changed)
        torch.testing.assert_close(later[:, : t + 1], hidden[:, : t + 1], atol=1e-12, rtol=0)
        assert not torch.allclose(later[0, t + 1 :], hidden[0, t + 1 :])


def forward(model, seq: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
    if "timestamps" in model.extra_inputs:
        return model(seq, times)
    return model(seq)


@pytest.mark.parametrize("name", NAMES)
def test_real_positions_read_the_same_with_or_without_left_padding(name: str, features) -> None:
    """All three are ``padding_free`` (local windows and blocks counted from the right, the GRU
    over real items only), so the trainer and the evaluator may cut their padding."""
    model = make(name, features).double().eval()
    assert model.padding_free
    short = torch.randint(1, NUM_ITEMS + 1, (4, 5), generator=torch.Generator().manual_seed(1))
    short[1, :2] = 0
    times = torch.cumsum(torch.rand(4, 5, dtype=torch.float64) * 7200, 1)
    padded = torch.nn.functional.pad(short, (MAX_LEN - 5, 0))
    padded_times = torch.nn.functional.pad(times, (MAX_LEN - 5, 0))
    real = short != 0
    torch.testing.assert_close(
        forward(model, padded, padded_times)[:, -5:][real],
        forward(model, short, times)[real],
        atol=1e-12,
        rtol=0,
    )


@pytest.mark.parametrize("name", ["sdat", "srt"])
def test_last_position_training_never_puts_the_target_in_the_input(name: str, features) -> None:
    model = make(name, features, objective="last")
    train = tiny_sequences(rows=5)
    examples = make_examples(train, model.objective)
    batch = make_batch(train, examples, np.arange(len(examples)), model.objective, MAX_LEN)
    for r in range(len(examples)):
        row = train.row(int(examples.rows[r]))
        assert int(batch.targets[r]) == row[examples.ends[r]]
        window = batch.inputs[r][batch.inputs[r] != 0].numpy()
        start = max(0, examples.ends[r] - MAX_LEN)
        np.testing.assert_array_equal(window, row[start : examples.ends[r]])
