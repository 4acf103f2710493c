"""The training platform's extension points, each through ``train()``: auxiliary losses,
``train.init_from``, ``data.split`` (with its leakage guarantee) and ratings per example."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from train_helpers import NUM_ITEMS, tiny_config, write_walks

from attnsvm.rec.config import DataConfig, ModelChoice, TrainConfig
from attnsvm.rec.models import MODELS, LossConfig, SASRec
from attnsvm.rec.models.registry import ModelSpec
from attnsvm.rec.models.sasrec import SASRecConfig
from attnsvm.rec.train import train
from attnsvm.rec.train.checkpoint import read_weights
from attnsvm.rec.train.scoring import build, load_split
from attnsvm.rec.train.warm_start import InitError


def write_rated_log(path: Path, num_users: int = 60, future_from: float = 0.9) -> Path:
    """ML-100K ``u.data`` lines (user, item, rating, time): walks of step 3 over items
    1..NUM_ITEMS with rating ``item % 5 + 1``; events in the last ``1 − future_from`` of the
    time span use items NUM_ITEMS+1..NUM_ITEMS+10 only, so those items exist only after the
    temporal split's cut."""
    rng = np.random.default_rng(0)
    lines, span = [], 1_000_000
    for user in range(num_users):
        times = np.sort(rng.integers(0, span, size=int(rng.integers(6, 14))))
        start = int(rng.integers(NUM_ITEMS))
        for step, time in enumerate(times):
            item = (start + 3 * step) % NUM_ITEMS + 1
            if time >= future_from * span:
                item = NUM_ITEMS + 1 + (start + step) % 10
            lines.append(f"{user + 1}\t{item}\t{item % 5 + 1}\t{time}")
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass(frozen=True)
class RatedSASRecConfig(SASRecConfig):
    rating_weight: float = 0.0  # weight of the auxiliary term "rating_norm"


class RatedSASRec(SASRec):
    """SASRec that reads each event's rating, checks it is the rating of the item beside it
    (``item % 5 + 1``, 0 at padding), and declares one auxiliary loss that uses the ratings."""

    config_class = RatedSASRecConfig
    extra_inputs = ("ratings",)
    seen_ratings = 0

    def _check(self, item_seq: torch.Tensor, ratings: torch.Tensor) -> None:
        expected = torch.where(item_seq > 0, item_seq % 5 + 1, 0).to(ratings.dtype)
        assert ratings.shape == item_seq.shape and torch.equal(ratings, expected)
        type(self).seen_ratings += int((ratings > 0).sum())

    def forward(self, item_seq: torch.Tensor, ratings: torch.Tensor) -> torch.Tensor:
        self._check(item_seq, ratings)
        return super().forward(item_seq)

    def score_last(self, item_seq: torch.Tensor, ratings: torch.Tensor) -> torch.Tensor:
        self._check(item_seq, ratings)
        return super().score_last(item_seq)

    def auxiliary_weights(self) -> dict[str, float]:
        return {"rating_norm": self.config.rating_weight}

    def auxiliary_losses(self, names, item_seq, hidden, ratings):
        weights = ratings / 5.0  # a rating-weighted penalty on the hidden states' norms
        return {"rating_norm": (hidden.pow(2).sum(-1) * weights).sum() / weights.sum()}


@pytest.fixture
def rated_model(monkeypatch):
    monkeypatch.setitem(MODELS, "rated", ModelSpec(RatedSASRecConfig, RatedSASRec, "test"))
    return "rated"


@pytest.fixture(scope="module")
def rated_log(tmp_path_factory) -> Path:
    return write_rated_log(tmp_path_factory.mktemp("rated") / "u.data")


def _rated_config(data: Path, **overrides):
    config = tiny_config(data, model="rated", epochs=2, dropout=0.0)
    return replace(config, model=ModelChoice("rated", {**config.model.overrides, **overrides}))


def _log(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


# -- auxiliary losses and ratings ---------------------------------------------------------------


def test_ratings_reach_the_model_aligned_with_items_in_training_and_evaluation(
    rated_model, rated_log, tmp_path
):
    torch.set_num_threads(1)
    RatedSASRec.seen_ratings = 0
    train(_rated_config(rated_log), tmp_path / "run", show_progress=False)
    assert RatedSASRec.seen_ratings > 0  # every call was checked inside the model


def test_data_without_ratings_is_refused_before_training(rated_model, walks, tmp_path):
    with pytest.raises(ValueError, match=r"needs event ratings and dataset .*walks\.txt"):
        train(_rated_config(walks), tmp_path / "run", show_progress=False)


def test_a_zero_weight_auxiliary_loss_is_exactly_the_plain_run(rated_model, rated_log, tmp_path):
    torch.set_num_threads(1)
    plain = train(_rated_config(rated_log), tmp_path / "plain", show_progress=False)
    zero = train(
        _rated_config(rated_log, rating_weight=0.0), tmp_path / "zero", show_progress=False
    )
    weighted = train(
        _rated_config(rated_log, rating_weight=0.5), tmp_path / "weighted", show_progress=False
    )
    assert zero.test == plain.test
    weights = {
        name: read_weights(run.run_dir / "model.safetensors")
        for name, run in (("plain", plain), ("zero", zero), ("weighted", weighted))
    }
    assert all(torch.equal(weights["plain"][k], weights["zero"][k]) for k in weights["plain"])
    assert any(
        not torch.equal(weights["plain"][k], weights["weighted"][k]) for k in weights["plain"]
    )
    assert all("aux" not in record for record in _log(plain.run_dir))
    terms = [record["aux"]["rating_norm"] for record in _log(weighted.run_dir)]
    assert len(terms) == 2 and all(t > 0 for t in terms)
    # the term pulls the hidden norms down: the logged penalty falls between the epochs
    assert terms[1] < terms[0]


def test_l2_emb_is_a_training_option_that_logs_its_term(walks, tmp_path):
    torch.set_num_threads(1)
    config = tiny_config(walks, epochs=2, loss=LossConfig(name="ce", l2_emb=1e-3))
    result = train(config, tmp_path / "run", show_progress=False)
    terms = [record["aux"]["l2_emb"] for record in _log(result.run_dir)]
    assert len(terms) == 2 and all(t > 0 for t in terms)
    with pytest.raises(ValueError, match="l2_emb"):
        LossConfig(l2_emb=-1.0)


# -- init_from ----------------------------------------------------------------------------------


class StartingWeights:
    """A callback that keeps the weights the run starts from."""

    def on_train_begin(self, model, run_dir):
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def on_epoch_end(self, state):
        pass


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    data = write_walks(tmp_path_factory.mktemp("pre") / "walks.txt")
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("runs") / "pre"
    return train(tiny_config(data, epochs=2), run, show_progress=False).run_dir


def _fine_tune(data: Path, source: Path, strict: bool = True):
    config = tiny_config(data, epochs=1)
    return replace(config, train=replace(config.train, init_from=str(source), init_strict=strict))


def test_init_from_starts_from_the_source_weights_and_records_it(pretrained, walks, tmp_path):
    start = StartingWeights()
    result = train(_fine_tune(walks, pretrained), tmp_path / "tuned", [start], show_progress=False)
    source = read_weights(pretrained / "model.safetensors")
    assert set(start.state) == set(source)
    assert all(torch.equal(start.state[k], source[k]) for k in source)
    record = json.loads((result.run_dir / "init_from.json").read_text())
    assert record["source"] == str(pretrained) and record["strict"]
    assert sorted(record["loaded"]) == sorted(source) and not record["initialised"]
    saved = json.loads((result.run_dir / "config.json").read_text())
    assert saved["train"]["init_from"] == str(pretrained)


def test_a_plain_run_starts_elsewhere(pretrained, walks, tmp_path):
    start = StartingWeights()
    train(tiny_config(walks, epochs=1), tmp_path / "plain", [start], show_progress=False)
    source = read_weights(pretrained / "model.safetensors")
    assert not torch.equal(start.state["items.input.weight"], source["items.input.weight"])


def test_partial_init_remaps_the_item_table_by_external_id(pretrained, tmp_path):
    # another catalogue: the same walks with every item id shifted by 5 (1..30 → 6..35), so
    # items 6..30 are shared (under other internal ids) and 31..35 are new
    source_data = json.loads((pretrained / "config.json").read_text())["data"]["dataset"]
    lines = Path(source_data).read_text().splitlines()
    moved = [" ".join([w[0], *(str(int(i) + 5) for i in w[1:])]) for w in map(str.split, lines)]
    data = tmp_path / "shifted.txt"
    data.write_text("\n".join(moved) + "\n")
    with pytest.raises(InitError, match="catalogues differ"):
        train(_fine_tune(data, pretrained), tmp_path / "strict", show_progress=False)
    start = StartingWeights()
    config = _fine_tune(data, pretrained, strict=False)
    result = train(config, tmp_path / "partial", [start], show_progress=False)
    source = read_weights(pretrained / "model.safetensors")["items.input.weight"]
    old_ids = json.loads((pretrained / "id_maps.json").read_text())["items"]
    new_ids = json.loads((result.run_dir / "id_maps.json").read_text())["items"]
    fresh = build(config, len(new_ids) - 1).state_dict()["items.input.weight"]
    table = start.state["items.input.weight"]
    for row, item in enumerate(new_ids[1:], start=1):
        if str(item) in map(str, old_ids[1:]):
            old_row = [str(i) for i in old_ids].index(str(item))
            assert torch.equal(table[row], source[old_row]), item
        else:
            assert int(item) > NUM_ITEMS and torch.equal(table[row], fresh[row]), item
    record = json.loads((result.run_dir / "init_from.json").read_text())
    assert "items.input.weight" in record["remapped"] and record["items_matched"] == 25


def test_init_from_a_missing_run_is_a_clear_error(walks, tmp_path):
    with pytest.raises(InitError, match="no such run directory"):
        train(_fine_tune(walks, tmp_path / "nowhere"), tmp_path / "x", show_progress=False)


# -- data.split ---------------------------------------------------------------------------------


def test_temporal_split_trains_on_the_past_only(rated_log, tmp_path):
    """Items that occur only after the validation cut never enter a training input: with a
    separate output table, BCE and no weight decay their input rows keep their initial
    values exactly, while the rows of past items move."""
    torch.set_num_threads(1)
    base = tiny_config(rated_log, model="sasrec", epochs=2, dropout=0.0)
    config = replace(
        base,
        model=ModelChoice("sasrec", {**base.model.overrides, "separate_output_embedding": True}),
        data=DataConfig(
            dataset=str(rated_log),
            max_len=12,
            split="temporal",
            valid_fraction=0.1,
            test_fraction=0.1,
            unseen_policy="keep",
        ),
        loss=LossConfig(name="bce"),
    )
    result = train(config, tmp_path / "run", show_progress=False)
    assert json.loads((result.run_dir / "metrics.json").read_text())["protocol"].startswith(
        "temporal"
    )
    split = load_split(config.data)
    ids = split.item_ids.astype(int)
    future = np.flatnonzero(ids > NUM_ITEMS)
    past = np.flatnonzero((ids >= 1) & (ids <= NUM_ITEMS))
    assert future.size == 10 and not np.isin(future, split.train.items).any()
    assert np.isin(future, split.test.targets.items).any()  # the future is what is tested
    initial = build(config, split.num_items).state_dict()["items.input.weight"]
    trained = read_weights(result.run_dir / "model.safetensors")["items.input.weight"]
    assert torch.equal(trained[future], initial[future])
    assert not torch.equal(trained[past], initial[past])


def test_session_split_trains_and_ranks_every_prefix(walks, tmp_path):
    torch.set_num_threads(1)
    config = tiny_config(walks, epochs=1)
    config = replace(config, data=replace(config.data, split="session"))
    result = train(config, tmp_path / "run", show_progress=False)
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    assert metrics["protocol"].startswith("session")
    split = load_split(config.data)
    test_sessions = np.unique(split.test.users)
    assert not np.isin(test_sessions, split.train.users).any()  # no test session trains
    assert len(split.test) == int((split.test.history.lengths >= 1).sum())


def test_split_settings_are_validated(walks):
    from attnsvm.rec.config import ConfigError, validate

    config = tiny_config(walks)
    for data, message in (
        (replace(config.data, split="random"), "data.split"),
        (replace(config.data, valid_fraction=0.6, test_fraction=0.5), "must be < 1"),
        (replace(config.data, unseen_policy="maybe"), "unseen_policy"),
    ):
        with pytest.raises(ConfigError, match=message):
            validate(replace(config, data=data))
    assert TrainConfig().init_from is None
