"""Typed settings: the ``Config`` base class and the coercion of written values to a type.

``Config`` is the frozen dataclass every model and loss config derives from. It round-trips
through plain dicts (``to_dict`` / ``from_dict``) and checks each field's type and range with an
error that names the class and the field. ``coerce`` turns a value parsed from TOML/JSON, or a
``--set`` string, into a field's type, and raises ``ConfigError`` naming the key and its source.
No float setting anywhere may be NaN or infinite (TOML and JSON both spell them), ``Range``
says where a numeric setting may lie, and ``check_number`` is the one check of both, for a config
field, a command-line option (``attnsvm.cli.options``) and a limit set in the environment.
A leaf of ``attnsvm.rec``: the network blocks (``nn.losses``), the models and the run
configuration (``rec/config.py``) all build on it.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Self

from attnsvm.errors import ExpectedFailure, shown


@dataclass(frozen=True)
class Config:
    """A frozen dataclass that round-trips through plain dicts, with field-naming errors."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(
                f"unknown {cls.__name__} key {unknown[0]!r} (known keys: {', '.join(names)})"
            )
        hints = typing.get_type_hints(cls)
        for name, value in data.items():
            _check_type(cls.__name__, name, hints[name], value)
        return cls(**data)

    def replace(self, **overrides: Any) -> Self:
        return self.from_dict({**self.to_dict(), **overrides})

    def _choice(self, name: str, allowed: tuple[str, ...]) -> None:
        if getattr(self, name) not in allowed:
            raise ValueError(
                f"{type(self).__name__}.{name} must be one of {allowed}, "
                f"got {getattr(self, name)!r}"
            )

    def _range(self, name: str, low: float, high: float, *, high_open: bool = False) -> None:
        value = getattr(self, name)
        if not (low <= value < high if high_open else low <= value <= high):
            bracket = ")" if high_open else "]"
            raise ValueError(
                f"{type(self).__name__}.{name} must lie in [{low}, {high}{bracket}, got {value}"
            )


def _check_type(owner: str, name: str, hint: Any, value: Any) -> None:
    allowed = typing.get_args(hint) or (hint,)
    if float in allowed:
        allowed = (*allowed, int)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        names = " | ".join("None" if a is type(None) else a.__name__ for a in allowed)
        raise ValueError(
            f"{owner}.{name} must be {names}, got {type(value).__name__} {shown(value)}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{owner}.{name} must be a finite number, got {value}")


@dataclass(frozen=True)
class Range:
    """Where a numeric setting may lie: between ``low`` and ``high``, each bound included unless
    it is open."""

    low: float
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        high = "∞" if self.high == math.inf else f"{self.high:,}"
        opening, closing = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{opening}{self.low:,}, {high}{closing}"


class ConfigError(ExpectedFailure, ValueError):
    """A bad configuration: names the key (and the file, when it came from one)."""


def check_number(value: float, allowed: Range, name: str) -> None:
    """A ``ConfigError`` unless ``value`` is a finite number inside ``allowed``; ``name`` is
    what the message calls it (``"run.toml: train.lr"``, ``"--steps"``, an environment
    variable)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {shown(value)}")
    if value not in allowed:
        raise ConfigError(f"{name} must lie in {allowed}, got {shown(value)}")


def coerce(value: Any, hint: Any, key: str, source: str) -> Any:
    """``value`` (a parsed TOML/JSON value or a ``--set`` string) as the type ``hint``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        is_none = value is None or (isinstance(value, str) and value.lower() in ("none", "null"))
        if is_none and type(None) in options:
            return None
        errors = []
        for option in (o for o in options if o is not type(None)):
            try:
                return coerce(value, option, key, source)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if errors else f"{source}: {key} cannot be None")
    if origin is tuple:
        items = value
        if isinstance(value, str):
            text = value.strip().strip("[]()")
            items = [part.strip() for part in text.split(",") if part.strip()]
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{source}: {key} must be a list, got {value!r}")
        args = typing.get_args(hint)
        item_types = [args[0]] * len(items) if args[-1] is Ellipsis else list(args)
        if len(item_types) != len(items):
            raise ConfigError(f"{source}: {key} needs {len(item_types)} values, got {value!r}")
        return tuple(coerce(v, t, key, source) for v, t in zip(items, item_types, strict=True))
    return _scalar(value, hint, key, source)


def _scalar(value: Any, hint: Any, key: str, source: str) -> Any:
    bad = ConfigError(
        f"{source}: {key} must be {getattr(hint, '__name__', hint)}, got {shown(value)}"
    )
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise bad
    if hint is int:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                raise bad from None
        raise bad
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise bad
        try:
            number = float(value)
        except (ValueError, OverflowError):  # not a number, or an integer beyond any float
            raise bad from None
        if not math.isfinite(number):  # TOML and JSON both spell nan and inf
            raise ConfigError(f"{source}: {key} must be a finite number, got {shown(value)}")
        return number
    if hint is str:
        if isinstance(value, str):
            return value
        raise bad
    raise ConfigError(f"{source}: {key} has an unsupported type {hint}")
