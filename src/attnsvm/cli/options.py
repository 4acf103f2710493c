"""Every numeric command-line option's range, checked as the config fields are checked.

``OPTION_RANGES`` names each numeric option of every command (``"rl episodes --steps"``) with the
``Range`` it may take, as ``attnsvm.rec.config.RANGES`` does for the config fields. ``check_ranges``
(``cli/main.load_command`` calls it on every command it builds) makes each of those options
refuse a value outside its range, NaN or ±∞ with ``config_base.check_number``, the check that
refuses ``--set train.lr=nan``: one ``error: …`` line naming the option, before the command does
any work; the option's ``--help`` line shows its range. A test walks the app's command tree
(``test_option_validation.py`` in ``tests/reliability``) and fails on a numeric option with no
range here, so a new command's options are checked by construction.

The bounds are the widest values that make sense; what depends on the data or the run (a ``-k``
beyond the catalogue, a ``--layer`` the model lacks) is still checked where that is known.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import click
from typer.core import TyperGroup

from attnsvm.rec.config_base import Range, check_number
from attnsvm.serve.server import RANGES as SERVE

_LARGE = 2**31 - 1
_COUNT = Range(1, _LARGE)
_SEED = Range(0, 2**63 - 1)  # as train.seed: numpy's SeedSequence takes no negative seed
_USERS = Range(1, 10**6)  # simulated users per group: each rates every item of the simulator

#: command path and option → the range its value must lie in
OPTION_RANGES: dict[str, Range] = {
    "evaluate --sampled": _COUNT,  # and below the catalogue
    "recommend -k": _COUNT,  # and at most the catalogue
    "similar -k": _COUNT,
    "lens --sequences": _COUNT,
    "lens --layer": Range(0, _LARGE),  # and a layer of the model
    "lens --head": Range(0, _LARGE),
    "tune --trials": Range(1, 10**6),
    "serve --port": SERVE["port"],
    "serve --workers": SERVE["workers"],
    "serve --max-batch": SERVE["max_batch"],
    "serve --batch-wait-ms": SERVE["max_wait_ms"],
    "serve --threads": SERVE["threads"],
    "explore --port": SERVE["port"],
    "theory run --seeds": Range(1, 10**4),
    "data prepare --min-per-user": Range(0, _LARGE),
    "data prepare --min-per-item": Range(0, _LARGE),
    "rl simulator --groups": _COUNT,  # and at most the users who rated
    "rl simulator --items": _COUNT,  # and at most the catalogue
    "rl simulator --shrinkage": Range(0),
    "rl simulator --factors": Range(0, _LARGE),
    "rl simulator --seed": _SEED,
    "rl rlt4rec --steps": _COUNT,  # and at most the simulator's catalogue
    "rl rlt4rec --valid-users": _USERS,
    "rl rlt4rec --test-users": _USERS,
    "rl rlt4rec --users-seed": _SEED,
    "rl episodes --users": _USERS,
    "rl episodes --steps": _COUNT,  # and at most the simulator's catalogue
    "rl episodes --users-seed": _SEED,
    "rl episodes --seed": _SEED,
    "rl rated --threshold": Range(-math.inf),  # any finite rating: a table's own scale
}


def option_name(param: click.Parameter) -> str:
    """How messages and ``OPTION_RANGES`` name a parameter: its longest flag (``--steps``,
    ``-k``), or an argument's name."""
    return max(param.opts, key=len)


def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    """``command`` and every command under it, each with its path (``"rl episodes"``)."""
    yield path, command
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            yield from walk(sub, f"{path} {name}")


class _InRange:
    """A parameter callback: ``check_number`` on the value given, then any callback before."""

    def __init__(self, name: str, allowed: Range, previous: Callable | None) -> None:
        self.name, self.allowed, self.previous = name, allowed, previous

    def __call__(self, ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            check_number(value, self.allowed, self.name)
        return value if self.previous is None else self.previous(ctx, param, value)


def check_ranges(command: click.Command, path: str) -> click.Command:
    """``command`` (named ``path``), each numeric option of it and of its subcommands checked
    against its ``OPTION_RANGES`` entry when it is parsed."""
    for where, each in walk(command, path):
        for param in each.params:
            allowed = OPTION_RANGES.get(f"{where} {option_name(param)}")
            if allowed is not None:
                param.callback = _InRange(option_name(param), allowed, param.callback)
                param.help = f"{param.help or ''} (range {allowed})".strip()
    return command
