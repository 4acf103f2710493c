"""``StreamConfig``: the typed, round-tripping settings of a prequential stream run.

Three parts, each a ``Config`` or a model's own config: ``model`` (a name of ``STREAM_MODELS``
or of the registry, with overrides of its config), ``data`` (the stream: a dataset, a stream of
``events.STREAMS`` or a file, and the raw-data root) and ``stream`` (the protocol and the online
optimiser). ``to_dict``/``from_dict`` round-trip exactly (a test checks), ``with_settings`` takes
``--set section.key=value`` strings coerced to each field's type, and every value outside its
range is a ``ConfigError`` naming the key.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnsvm._atomic import write_text
from attnsvm._files import read_json
from attnsvm.errors import UnreadableFile, shown
from attnsvm.rec.config_base import Config, ConfigError, coerce
from attnsvm.rec.models.base import TransformerConfig
from attnsvm.rec.models.pitransformer import PITransformer, PITransformerConfig
from attnsvm.rec.models.registry import MODELS, resolve

RANK_OVER = ("seen", "all")


@dataclass(frozen=True)
class StreamData(Config):
    dataset: str = "ml-100k"  # a registered dataset, a stream of events.STREAMS, or a file
    root: str | None = None  # folder of raw datasets (../shared/data)


@dataclass(frozen=True)
class StreamSettings(Config):
    chunk_size: int = 64  # events per chunk: predicted together, then one SGD step
    history: int = 50  # items of the user's own history in x_t (the model's max_len)
    replay_streams: int = 0  # R: streams replaying seen chunks, each with its own memory
    memory: bool = True  # Transformer-XL memory of the previous chunk (models that have one)
    lr: float = 1e-3  # AdamW
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # max global gradient norm; 0: none
    seed: int = 0
    #: candidates of the ranking: items seen in the stream before the chunk ("seen"), or the
    #: whole catalogue ("all"); an event whose item is new to the stream is a miss under "seen"
    rank_over: str = "seen"
    k: int = 10  # the cut-off of HR@k and NDCG@k
    max_events: int = 0  # the first max_events events of the stream only (0: all)
    save_every: int = 25  # chunks between saved resume states (and the end)
    log_every: int = 50  # chunks between log.jsonl records (and the end)

    def __post_init__(self) -> None:
        for name in ("chunk_size", "history", "k", "save_every", "log_every"):
            self._range(name, 1, 2**31 - 1)
        for name in ("replay_streams", "max_events"):
            self._range(name, 0, 2**31 - 1)
        self._range("seed", 0, 2**63 - 1)
        if not self.lr > 0:
            raise ValueError(f"StreamSettings.lr must be > 0, got {self.lr}")
        self._range("weight_decay", 0.0, float("inf"))
        self._range("grad_clip", 0.0, float("inf"))
        self._choice("rank_over", RANK_OVER)


#: models with a stream path of their own; any other registry model is scored by its history
STREAM_MODELS: dict[str, tuple[type[TransformerConfig], type]] = {
    "pi-transformer": (PITransformerConfig, PITransformer),
}


def model_config_class(name: str) -> type[TransformerConfig]:
    if name in STREAM_MODELS:
        return STREAM_MODELS[name][0]
    try:
        return MODELS[resolve(name)[0]].config_class
    except ValueError as error:
        raise ConfigError(f"model: {error} (or {', '.join(STREAM_MODELS)})") from None


@dataclass(frozen=True)
class StreamConfig:
    model: str = "pi-transformer"
    model_overrides: dict[str, Any] = field(default_factory=dict)
    data: StreamData = field(default_factory=StreamData)
    stream: StreamSettings = field(default_factory=StreamSettings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": {"name": self.model, **self.model_overrides},
            "data": self.data.to_dict(),
            "stream": self.stream.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> StreamConfig:
        unknown = sorted(set(data) - {"model", "data", "stream"})
        if unknown:
            raise ConfigError(f"{source}: unknown section {unknown[0]!r} (model, data, stream)")
        for section in ("model", "data", "stream"):
            if not isinstance(data.get(section, {}), dict):
                raise ConfigError(
                    f"{source}: {section!r} must be a table of settings, got "
                    f"{type(data[section]).__name__} {shown(data[section])}"
                )
        model = dict(data.get("model", {}))
        name = model.pop("name", cls.model)
        config_class = model_config_class(name)
        if "max_len" in model:
            raise ConfigError(f"{source}: the model's window is stream.history, not model.max_len")
        try:
            config_class.from_dict(model)  # the model's fields, checked as its config checks them
            return cls(
                name,
                model,
                StreamData.from_dict(data.get("data", {})),
                StreamSettings.from_dict(data.get("stream", {})),
            )
        except (ValueError, TypeError) as error:
            raise ConfigError(f"{source}: {error}") from None

    def with_settings(self, assignments: list[str]) -> StreamConfig:
        """This config with each ``"section.key=value"`` set (``model=NAME`` picks the model)."""
        data = self.to_dict()
        for assignment in assignments:
            key, sep, value = assignment.partition("=")
            section, _, name = key.strip().partition(".")
            if not sep or (section != "model" and not name):
                raise ConfigError(f"--set {assignment!r}: expected section.key=value")
            if section == "model" and not name:
                data["model"] = {"name": value.strip()}
                continue
            hints = {
                "model": typing.get_type_hints(model_config_class(data["model"]["name"])),
                "data": typing.get_type_hints(StreamData),
                "stream": typing.get_type_hints(StreamSettings),
            }
            if section not in hints or name not in hints[section]:
                known = ", ".join(f"{s}.{k}" for s in hints for k in hints[s] if s != "model")
                raise ConfigError(f"--set: unknown key {key.strip()!r} (known: {known}, model.*)")
            data[section][name] = coerce(value, hints[section][name], key.strip(), "command line")
        return StreamConfig.from_dict(data, source="command line")

    def model_config(self) -> dict[str, Any]:
        """The overrides the model is built with: the preset's, these, and the window."""
        return {**self.model_overrides, "max_len": self.stream.history}


def save_stream_config(config: StreamConfig, path: str | Path) -> None:
    write_text(path, json.dumps(config.to_dict(), indent=2) + "\n")


def load_stream_config(path: str | Path) -> StreamConfig:
    try:
        data = read_json(Path(path))
    except UnreadableFile as error:
        raise ConfigError(f"{path}: cannot read the stream config ({error.problem})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a table of sections")
    return StreamConfig.from_dict(data, source=str(path))
