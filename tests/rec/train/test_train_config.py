"""RunConfig: exact JSON/TOML round trips, dotted overrides with coercion, errors naming keys."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.rec.config import (
    ConfigError,
    DataConfig,
    EvalConfig,
    ModelChoice,
    RunConfig,
    TrainConfig,
    apply_overrides,
    load_config,
    save_config,
)
from attnsvm.rec.models import LossConfig

finite = st.floats(1e-6, 10.0, allow_nan=False)


@st.composite
def run_configs(draw) -> RunConfig:
    ks = tuple(draw(st.lists(st.integers(1, 50), min_size=1, max_size=4, unique=True)))
    model = draw(st.sampled_from(["sasrec", "sasrec+", "gsasrec", "bert4rec"]))
    overrides = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "hidden_size": st.sampled_from([16, 32, 64]),
                "dropout": st.floats(0.0, 0.9),
                "num_blocks": st.integers(1, 3),
            },
        )
    )
    if "hidden_size" in overrides:
        overrides["num_heads"] = 1
    return RunConfig(
        model=ModelChoice(model, overrides),
        data=DataConfig(
            dataset=draw(st.sampled_from(["synthetic", "ml-1m", "/tmp/x y.txt"])),
            max_len=draw(st.none() | st.integers(1, 300)),
        ),
        loss=draw(
            st.none()
            | st.builds(
                LossConfig,
                name=st.sampled_from(["bce", "ce", "gbce"]),
                num_negatives=st.integers(1, 300),
                gbce_t=st.floats(0.0, 1.0),
            )
        ),
        train=TrainConfig(
            epochs=draw(st.integers(1, 500)),
            lr=draw(finite),
            grad_clip=draw(st.none() | finite),
            bf16=draw(st.booleans()),
            betas=(draw(st.floats(0, 0.99)), draw(st.floats(0, 0.999))),
            steps_per_epoch=draw(st.none() | st.integers(1, 100)),
        ),
        eval=EvalConfig(
            ks=ks,
            valid_metric=f"NDCG@{ks[0]}",
            valid_users=draw(st.none() | st.integers(1, 10_000)),
        ),
    )


@settings(max_examples=40)
@given(run_configs())
def test_json_round_trip_is_exact(tmp_path_factory, config):
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    save_config(config, path)
    assert load_config(path) == config


@settings(max_examples=40)
@given(run_configs())
def test_toml_round_trip_is_exact(tmp_path_factory, config):
    path = tmp_path_factory.mktemp("cfg") / "config.toml"
    try:
        save_config(config, path)
    except ConfigError as error:
        # only a None whose default is not None cannot be written (TOML has no null)
        assert "cannot be written to TOML" in str(error)
        return
    assert load_config(path) == config


def test_toml_refuses_a_none_it_cannot_express(tmp_path):
    config = RunConfig(loss=LossConfig(ce_chunk_size=None))
    with pytest.raises(ConfigError, match=r"loss.ce_chunk_size = None .* save the config as JSON"):
        save_config(config, tmp_path / "c.toml")
    assert not (tmp_path / "c.toml").exists()
    save_config(config, tmp_path / "c.json")
    assert load_config(tmp_path / "c.json") == config


def test_overrides_coerce_to_field_types():
    config = apply_overrides(
        RunConfig(),
        [
            "train.lr=3e-4",
            "train.bf16=true",
            "train.grad_clip=none",
            "eval.ks=1,5,10",
            "train.betas=[0.9, 0.99]",
            "model.dropout=0.3",
            "model.hidden_size=32",
            "loss.num_negatives=7",
            "data.max_len=50",
            "train.steps_per_epoch=12",
        ],
    )
    assert config.train.lr == 3e-4 and config.train.bf16 is True
    assert config.train.grad_clip is None and config.train.steps_per_epoch == 12
    assert config.eval.ks == (1, 5, 10) and config.train.betas == (0.9, 0.99)
    assert config.model.overrides == {"dropout": 0.3, "hidden_size": 32}
    # a loss override starts from the preset's loss (sasrec+ is full CE)
    assert config.loss == LossConfig(name="ce", num_negatives=7)
    assert config.data.max_len == 50


def test_model_override_picks_the_model():
    config = apply_overrides(RunConfig(), ["model=bert4rec", "model.mask_prob=0.4"])
    assert config.model == ModelChoice("bert4rec", {"mask_prob": 0.4})


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("train.lrr=1", r"unknown key 'train.lrr'; did you mean 'train.lr'\?"),
        (
            "model.hiden_size=3",
            r"unknown key 'model.hiden_size'; did you mean 'model.hidden_size'\?",
        ),
        ("trian.lr=1", r"unknown key 'trian.lr'"),
        ("model=sasrecc", r"unknown model 'sasrecc'; did you mean 'sasrec'\?"),
        ("train.lr=fast", r"train.lr must be float, got 'fast'"),
        ("train.epochs=2.5", r"train.epochs must be int"),
        ("train.bf16=maybe", r"train.bf16 must be bool"),
        ("model.max_len=50", r"set the window length as data.max_len"),
        ("eval.valid_metric=NDCG@7", r"cut-off 7 is not in eval.ks"),
        ("loss.name=hinge", r"LossConfig.name must be one of"),
        ("train.lr", r"expected key=value"),
    ],
)
def test_bad_overrides_name_the_key(assignment, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(RunConfig(), [assignment])


def test_file_errors_name_the_file(tmp_path):
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[train\nlr = 1\n")
    with pytest.raises(ConfigError, match=r"bad.toml: not valid toml"):
        load_config(bad_toml)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[train]\nlearning_rate = 0.1\n")
    with pytest.raises(ConfigError, match=r"unknown.toml: unknown key 'train.learning_rate'"):
        load_config(unknown)
    with pytest.raises(ConfigError, match=r"missing.json: cannot read config"):
        load_config(tmp_path / "missing.json")


def test_resolved_loss_is_the_presets_unless_given():
    assert RunConfig(ModelChoice("gsasrec")).resolved_loss().name == "gbce"
    explicit = LossConfig(name="bce", num_negatives=3)
    assert dataclasses.replace(RunConfig(), loss=explicit).resolved_loss() == explicit
