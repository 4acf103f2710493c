"""The typed configuration of one training run, saved as JSON or TOML and round-tripped exactly.

A run is ``RunConfig(model, data, loss, train, eval)``:

- ``model``: a registered model or preset name plus config overrides (``ModelChoice``); in a
  file it is the table ``[model]`` with ``name = "sasrec+"`` and the overrides beside it.
- ``data``: dataset name (or path), split protocol, window length (``DataConfig``).
- ``loss``: ``attnsvm.rec.models.LossConfig``; ``None`` means the preset's own loss.
- ``train`` / ``eval``: optimiser, schedule, stopping, precision; metrics and protocol.

``apply_overrides(config, ["train.lr=3e-4", "model.hidden_size=128"])`` sets dotted keys,
coercing each string to the field's type. Unknown keys fail with the key's name and the
closest valid one.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnsvm._atomic import write_text
from attnsvm._files import read_text
from attnsvm.errors import InvalidRequest, UnreadableFile
from attnsvm.rec.config_base import ConfigError, Range, check_number, coerce
from attnsvm.rec.data.tables import TableLayout
from attnsvm.rec.models import MODELS, LossConfig, resolve
from attnsvm.rec.models.knn import build_baseline
from attnsvm.rec.models.registry import lookup, names

# attnsvm.rec.data.splits has each one's rules; "predefined": the dataset's own test sessions
SPLITS = ("leave-one-out", "temporal", "session", "predefined")
UNSEEN_POLICIES = ("drop", "keep")
OPTIMIZERS = ("adamw", "sam")  # "sam": AdamW inside sharpness-aware minimisation (train/sam.py)


@dataclass(frozen=True)
class ModelChoice:
    name: str = "sasrec+"
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DataConfig:
    dataset: str = "synthetic"  # a registered dataset name, or a path to an interactions file
    root: str | None = None  # folder of raw files (e.g. ../shared/data); None: prepared cache
    split: str = "leave-one-out"
    max_len: int | None = None  # window length; None: the model's own max_len
    # temporal: time cuts at quantiles 1 − valid − test and 1 − test of all events;
    # session: the last test_fraction of sessions (by start) are test, valid_fraction before them;
    # predefined: the dataset's own test file is test, the last valid_fraction of training valid
    valid_fraction: float = 0.1
    test_fraction: float = 0.1
    unseen_policy: str = "drop"  # temporal/session: drop evaluation targets unseen in training
    # transforms of the training rows only, never of what is evaluated (rec/data/transforms.py):
    # each row newest first (BiCAT's reverse pre-training), and generated items prepended from a
    # synthetic-prefix artefact: at most synthetic_items per row (0: all it holds), only to
    # rows shorter than synthetic_below (0: every row it covers)
    reverse_train: bool = False
    synthetic_prefix: str | None = None
    synthetic_items: int = 0
    synthetic_below: int = 0
    # a table of the user's own (``dataset`` a path): its column mapping, "user=uid,item=sku,
    # time=ts,rating=stars"; format csv/tsv/parquet (None: from the name), separator (None: the
    # format's) and header (None: present when columns are named); rec/data/tables.py reads it
    columns: str | None = None
    format: str | None = None
    separator: str | None = None
    header: bool | None = None

    def layout(self) -> TableLayout | None:
        """How to read ``dataset`` as a table of the user's own; None: as its name implies."""
        if self.columns is None:
            return None
        return TableLayout.parse(self.columns, self.format, self.separator, self.header)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 200
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.98)
    warmup_steps: int = 0  # linear warm-up from 0 to lr, then constant
    grad_clip: float | None = 1.0  # max global gradient norm; None: no clipping
    patience: int = 10  # epochs without a better validation metric before stopping
    min_steps: int = 0  # no early stop before this many optimiser steps (few steps an epoch)
    keep: str = "best"  # "best": best validation epoch, early stopping; "last": final epoch
    seed: int = 0
    bf16: bool = False  # bfloat16 autocast: forward passes and the full CE on bf16 operands
    compile: bool = False  # torch.compile the model for training (dynamic shapes, one graph)
    optimizer: str = "adamw"
    sam_rho: float = 0.05  # SAM neighbourhood radius ρ (with optimizer = "sam")
    steps_per_epoch: int | None = None  # cap on batches per epoch (gSASRec style); None: all
    num_threads: int | None = None  # torch threads; None: the process's (attnsvm.process)
    # padding-free models: each batch runs as this many groups of rows of similar length, each
    # without the padding its rows share (the same gradient, ~30 % less work on ML-1M)
    length_groups: int = 4
    init_from: str | None = None  # a finished run whose weights start this one (warm_start.py)
    init_strict: bool = True  # false: load what fits, remap item tables by external id


@dataclass(frozen=True)
class EvalConfig:
    ks: tuple[int, ...] = (1, 5, 10, 20)
    batch_size: int = 512
    exclude_seen: bool = True
    valid_metric: str = "NDCG@10"  # early stopping and best-checkpoint selection
    valid_users: int | None = None  # a fixed random subset of validation users; None: all
    # without valid_users: every validation user while users × items stays within this many
    # scores, else a fixed seeded sample of users that does (said when training starts); the
    # test always ranks every user. Every dataset in ../shared/data stays below it
    valid_max_scores: int | None = 10**10
    sampled_negatives: int | None = None  # also report sampled metrics with this many negatives
    sampled_sampler: str = "uniform"  # "uniform" | "popularity"


# Every numeric field of the sections above, with the range it may take (a model's and a loss's
# fields are checked by their own config classes). The upper bounds lie far beyond any real run
# and keep an absurd value from reaching an allocation or a C library; what a run would allocate
# is checked once the data is known (attnsvm.rec.train.preflight).
_LARGE = 2**31 - 1
RANGES: dict[str, Range] = {
    "data.max_len": Range(1, _LARGE),
    "data.valid_fraction": Range(0, 1, high_open=True),
    "data.test_fraction": Range(0, 1, low_open=True, high_open=True),
    "data.synthetic_items": Range(0, _LARGE),
    "data.synthetic_below": Range(0, _LARGE),
    "train.epochs": Range(1, 10**6),
    "train.batch_size": Range(1, _LARGE),
    "train.lr": Range(0, low_open=True),
    "train.weight_decay": Range(0),
    "train.betas": Range(0, 1, high_open=True),
    "train.warmup_steps": Range(0, _LARGE),
    "train.grad_clip": Range(0, low_open=True),
    "train.patience": Range(1, 10**6),
    "train.min_steps": Range(0, _LARGE),
    "train.seed": Range(0, 2**63 - 1),  # numpy's SeedSequence takes no negative seed
    "train.sam_rho": Range(0),
    "train.steps_per_epoch": Range(1, _LARGE),
    "train.num_threads": Range(1, 4096),
    "train.length_groups": Range(1, _LARGE),
    "eval.ks": Range(1, _LARGE),  # and at most the catalogue, checked with the data
    "eval.batch_size": Range(1, _LARGE),
    "eval.valid_users": Range(1, _LARGE),
    "eval.valid_max_scores": Range(1, 2**63 - 1),
    "eval.sampled_negatives": Range(1, _LARGE),
}


@dataclass(frozen=True)
class RunConfig:
    model: ModelChoice = field(default_factory=ModelChoice)
    data: DataConfig = field(default_factory=DataConfig)
    loss: LossConfig | None = None
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": {"name": self.model.name, **self.model.overrides}}
        for name in ("data", "loss", "train", "eval"):
            section = getattr(self, name)
            if section is not None:
                out[name] = {
                    f.name: _plain(getattr(section, f.name)) for f in dataclasses.fields(section)
                }
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> RunConfig:
        _check_keys(data, [f.name for f in dataclasses.fields(cls)], source)
        if not isinstance(data.get("model", {}), dict):
            raise ConfigError(f"{source}: 'model' must be a table with a 'name' key")
        model_table = dict(data.get("model", {}))
        name = model_table.pop("name", ModelChoice.name)
        _check_model_name(name, source)
        hints = lookup(name).fields
        _check_keys(model_table, list(hints), f"{source}: model", prefix="model.")
        overrides = {k: coerce(v, hints[k], f"model.{k}", source) for k, v in model_table.items()}
        sections: dict[str, Any] = {}
        for key, section_class in (
            ("data", DataConfig),
            ("loss", LossConfig),
            ("train", TrainConfig),
            ("eval", EvalConfig),
        ):
            if key in data:
                sections[key] = _section(section_class, data[key], key, source)
        config = cls(model=ModelChoice(name, overrides), **sections)
        validate(config, source)
        return config

    def resolved_loss(self) -> LossConfig:
        """The loss that trains this run: the explicit one, else the preset's."""
        if lookup(self.model.name).baseline:
            raise ConfigError(f"model {self.model.name!r} is a non-neural baseline: it has no loss")
        return self.loss if self.loss is not None else resolve(self.model.name)[2]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _check_model_name(name: Any, source: str) -> None:
    known = names()
    if name not in known:
        raise ConfigError(f"{source}: unknown model {name!r}{_suggest(str(name), known)}")


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{hint} (valid: {', '.join(known)})"


def _check_keys(data: dict[str, Any], known: list[str], where: str, prefix: str = "") -> None:
    for key in data:
        if key not in known:
            suggestions = [prefix + k for k in known]
            raise ConfigError(
                f"{where}: unknown key {prefix + key!r}{_suggest(prefix + key, suggestions)}"
            )


def _section(section_class: type, data: Any, key: str, source: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {key!r} must be a table of settings")
    hints = typing.get_type_hints(section_class)
    names = [f.name for f in dataclasses.fields(section_class)]
    _check_keys(data, names, source, prefix=f"{key}.")
    values = {k: coerce(v, hints[k], f"{key}.{k}", source) for k, v in data.items()}
    try:
        return section_class(**values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{source}: {key}: {error}") from None


def validate(config: RunConfig, source: str = "config") -> None:
    """The range of every numeric field, and the cross-field checks the dataclasses cannot make
    on their own."""
    train, eval_ = config.train, config.eval
    data = config.data
    for key, allowed in RANGES.items():
        section, _, name = key.partition(".")
        value = getattr(getattr(config, section), name)
        for number in value if isinstance(value, tuple) else (value,):
            if number is not None:
                check_number(number, allowed, f"{source}: {key}")
    if data.split not in SPLITS:
        raise ConfigError(f"{source}: data.split must be one of {SPLITS}")
    if data.unseen_policy not in UNSEEN_POLICIES:
        raise ConfigError(f"{source}: data.unseen_policy must be one of {UNSEEN_POLICIES}")
    if data.columns is None and (data.format, data.separator, data.header) != (None, None, None):
        raise ConfigError(f"{source}: data.format, .separator and .header need data.columns")
    try:
        data.layout()
    except InvalidRequest as error:
        raise ConfigError(f"{source}: data.columns: {error}") from None
    if data.valid_fraction + data.test_fraction >= 1:
        raise ConfigError(f"{source}: data.valid_fraction + data.test_fraction must be < 1")
    if data.split == "temporal" and data.valid_fraction == 0:
        raise ConfigError(f"{source}: a temporal split needs data.valid_fraction > 0")
    if data.split == "predefined" and data.valid_fraction == 0:
        # the validation sessions are carved from training; none would leave nothing to select on
        raise ConfigError(f"{source}: a predefined split needs data.valid_fraction > 0")
    if data.split == "predefined" and data.root is None:
        raise ConfigError(
            f"{source}: data.split = 'predefined' reads the dataset's own test file from its raw "
            "data: set data.root (e.g. ../shared/data)"
        )
    if "max_len" in config.model.overrides:
        raise ConfigError(f"{source}: set the window length as data.max_len, not model.max_len")
    if train.keep not in ("best", "last"):
        raise ConfigError(f"{source}: train.keep must be 'best' or 'last'")
    if train.optimizer not in OPTIMIZERS:
        raise ConfigError(f"{source}: train.optimizer must be one of {OPTIMIZERS}")
    if not eval_.ks:
        raise ConfigError(f"{source}: eval.ks must name at least one cut-off")
    metric, _, cutoff = eval_.valid_metric.partition("@")
    if metric not in ("HR", "NDCG", "MRR", "Recall") or not cutoff.isdigit():
        raise ConfigError(f"{source}: eval.valid_metric must look like 'NDCG@10'")
    if int(cutoff) not in eval_.ks:
        raise ConfigError(f"{source}: eval.valid_metric cut-off {cutoff} is not in eval.ks")
    if eval_.sampled_sampler not in ("uniform", "popularity"):
        raise ConfigError(f"{source}: eval.sampled_sampler must be 'uniform' or 'popularity'")
    if lookup(config.model.name).baseline:
        if config.loss is not None:
            raise ConfigError(f"{source}: model {config.model.name!r} is a baseline: no [loss]")
        try:
            build_baseline(config.model.name, **config.model.overrides)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"{source}: model: {error}") from None
        return
    try:
        resolve(config.model.name, **config.model.overrides)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{source}: model: {error}") from None


def apply_overrides(config: RunConfig, assignments: list[str]) -> RunConfig:
    """``config`` with each ``"section.key=value"`` set (``model=NAME`` picks the model)."""
    data = config.to_dict()
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {assignment!r}: expected key=value, e.g. train.lr=3e-4")
        if key == "model":
            data["model"] = {"name": value.strip()}
            continue
        section, _, name = key.partition(".")
        sections = ["model", "data", "loss", "train", "eval"]
        if section not in sections or not name:
            raise ConfigError(
                f"--set: unknown key {key!r}{_suggest(key, [s + '.' for s in sections])}"
            )
        if section == "loss" and "loss" not in data:
            data["loss"] = config.resolved_loss().to_dict()
            data["loss"] = {k: _plain(v) for k, v in data["loss"].items()}
        data.setdefault(section, {})[name] = value
    return RunConfig.from_dict(data, source="command line")


def load_config(path: str | Path) -> RunConfig:
    """A ``RunConfig`` from a ``.toml`` or ``.json`` file; errors name the file."""
    path = Path(path)
    try:
        text = read_text(path)  # a regular file only: a named pipe would block
    except UnreadableFile as error:
        raise ConfigError(f"{path}: cannot read config ({error.problem})") from None
    kind = path.suffix.lstrip(".") or "JSON"
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path}: not valid {kind}: {error}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid {kind} here (nested too deeply)") from None
    except ValueError as error:  # JSON: an integer of more digits than Python converts
        raise ConfigError(f"{path}: not valid {kind} here ({error})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a table of sections")
    return RunConfig.from_dict(data, source=str(path))


def save_config(config: RunConfig, path: str | Path) -> None:
    """Write ``config`` as TOML (``.toml``) or JSON (anything else), atomically."""
    path = Path(path)
    data = config.to_dict()
    text = to_toml(data) if path.suffix == ".toml" else json.dumps(data, indent=2) + "\n"
    write_text(path, text)


def to_toml(data: dict[str, Any]) -> str:
    """Our config tables as TOML; a ``None`` is left out, so it must be the field's default."""
    lines: list[str] = []
    for table, values in data.items():
        defaults = _defaults(table, values)
        lines.append(f"[{table}]")
        for key, value in values.items():
            if value is None:
                if defaults.get(key, None) is not None:
                    raise ConfigError(
                        f"{table}.{key} = None cannot be written to TOML (it would read back as "
                        f"{defaults[key]!r}); save the config as JSON"
                    )
                continue
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _defaults(table: str, values: dict[str, Any]) -> dict[str, Any]:
    classes = {"data": DataConfig, "loss": LossConfig, "train": TrainConfig, "eval": EvalConfig}
    if table == "model":
        if lookup(values["name"]).baseline:
            return {}  # a baseline's settings have no None to write
        config_class = MODELS[resolve(values["name"])[0]].config_class
    else:
        config_class = classes[table]
    return {
        f.name: f.default
        for f in dataclasses.fields(config_class)
        if f.default is not dataclasses.MISSING
    }


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return json.dumps(value)  # JSON numbers and strings are valid TOML
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ConfigError(f"cannot write {value!r} to TOML")
