"""``Config``: the frozen dataclass every model and loss config derives from.

It round-trips through plain dicts (``to_dict`` / ``from_dict``) and checks each field's type
and range with an error that names the class and the field. A leaf of ``attnsvm.rec``: the
network blocks (``nn.losses``) and the models both build on it.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Self


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
        raise ValueError(f"{owner}.{name} must be {names}, got {type(value).__name__} {value!r}")
