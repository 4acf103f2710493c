"""The one error boundary and the rules the corpus relies on: expected failures are one plain
line from the real ``attnsvm`` process, a bug still shows its traceback, every numeric setting
has a range, every download is verified."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing

from attnsvm.errors import ExpectedFailure, expected_message, printable, shown
from attnsvm.rec.config import RANGES, DataConfig, EvalConfig, TrainConfig
from attnsvm.rec.data.catalog import DATASETS
from attnsvm.rec.data.errors import DataFormatError

ATTNSVM = [sys.executable, "-m", "attnsvm.cli.main"]


def test_an_expected_failure_is_one_plain_line_from_the_real_process(tmp_path):
    data = tmp_path / "[bold]ratings[red] :x:.txt"  # markup in the name and in the content
    data.write_text("1 2 3\n[/bogus] 4\n")
    result = subprocess.run([*ATTNSVM, "data", "stats", str(data)], capture_output=True, text=True)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == f"error: {data}:2: user id '[/bogus]' is not an integer\n"


def test_a_bug_still_shows_its_traceback():
    bug = (
        "import attnsvm.rec.data.datasets as datasets\n"
        "def load_dataset(*args, **kwargs):\n"
        "    return 1 / 0\n"
        "datasets.load_dataset = load_dataset\n"
        "from attnsvm.cli.main import app\n"
        "app(['data', 'stats', 'anything'])\n"
    )
    result = subprocess.run([sys.executable, "-c", bug], capture_output=True, text=True)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr
    assert "error: " not in result.stderr.splitlines()[-1]


def test_the_boundary_tells_expected_failures_from_bugs():
    assert expected_message(DataFormatError("u.data", "is empty")) == "u.data: is empty"
    assert expected_message(FileNotFoundError(2, "No such file or directory", "x")) == (
        "x: No such file or directory"
    )
    assert expected_message(ValueError("a bug's message")) is None
    assert expected_message(KeyError("a bug's key")) is None
    assert issubclass(DataFormatError, ExpectedFailure)


def test_messages_quote_and_cut_what_the_user_gave():
    assert shown("x" * 1000) == f"'{'x' * 39}…{'x' * 19}' (1,000 characters)"
    assert shown(10**5000) == "an integer of 16,610 bits"
    assert printable("a\x1b[2Jb\nc") == "a\\x1b[2Jb / c"
    assert printable("y" * 5000).endswith("(message cut: 5,000 characters)")


def test_every_numeric_setting_of_the_run_config_has_a_range():
    for section in (DataConfig, TrainConfig, EvalConfig):
        name = section.__name__.removesuffix("Config").lower()
        hints = typing.get_type_hints(section)
        for field in dataclasses.fields(section):
            kinds = typing.get_args(hints[field.name]) or (hints[field.name],)
            if {int, float} & set(kinds) or any(typing.get_args(k) for k in kinds):
                assert f"{name}.{field.name}" in RANGES, f"{name}.{field.name} has no range"


def test_every_registered_download_is_verified():
    for spec in DATASETS.values():
        if spec.url is not None:  # a checksum, or a zip whose members carry their CRC-32
            assert spec.checksum is not None or spec.url.endswith(".zip"), spec.name
