"""``attnsvm models`` lists every system with the command that trains it, the ones outside the
registry too (the stream-only PI-Transformer, CRR, SAM, the recipes, RLT4Rec's episodes), and
every listed command is one the CLI parses, naming a model, recipe or setting that exists."""

from __future__ import annotations

import shlex

import click
from typer.testing import CliRunner

from attnsvm.cli.main import app, load_command
from attnsvm.rec.config import RunConfig, apply_overrides
from attnsvm.rec.models.registry import lookup, names
from attnsvm.rec.models.systems import systems
from attnsvm.rec.stream.config import STREAM_MODELS
from attnsvm.rec.train.recipe import RECIPES


def parsed(words: list[str]) -> dict:
    """The options of ``attnsvm WORDS…`` as the CLI parses them (nothing runs)."""
    command: click.Command = load_command(words[0])
    context = command.make_context(words[0], words[1:])
    while isinstance(command, click.Group):  # `rl crr …`: down to the subcommand
        name, command, rest = command.resolve_command(
            context, context.protected_args + context.args
        )
        context = command.make_context(name, rest, parent=context)
    return context.params


def test_models_lists_every_system_with_the_commands_that_train_it():
    listed = {system.name: system for system in systems()}
    assert set(names()) | {"pi-transformer", "crr", "sam"} == set(listed)
    assert listed["pi-transformer"].commands == (
        "attnsvm stream --model pi-transformer --data DATA --out RUN",
    )
    assert listed["crr"].commands == ("attnsvm rl crr STAGE1_RUN --out RUN",)
    assert "--recipe bicat" in listed["bicat"].commands[0]
    assert "--recipe mrtransformer" in listed["mrtransformer"].commands[0]
    assert any("attnsvm rl rlt4rec" in c for c in listed["rlt4rec"].commands)
    assert "--set train.optimizer=sam" in listed["sam"].commands[0]

    result = CliRunner().invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for system in systems():
        at = lines.index(f"{system.name}: {system.description}")
        assert lines[at + 1 : at + 1 + len(system.commands)] == [f"  {c}" for c in system.commands]


def test_every_listed_command_is_one_the_cli_accepts():
    for system in systems():
        for chained in system.commands:
            for command in chained.split(" && "):
                words = shlex.split(command)
                assert words[0] == "attnsvm", command
                options = parsed(words[1:])
                if words[1] == "train" and options["recipe"] is not None:
                    assert options["recipe"] in RECIPES
                elif words[1] == "train" and options["model"] != "MODEL":
                    lookup(options["model"])  # a ValueError for an unknown name
                if words[1] == "stream":
                    assert options["model"] in STREAM_MODELS
                if options.get("set_"):
                    config = apply_overrides(RunConfig(), options["set_"])
                    assert config.train.optimizer == "sam"
