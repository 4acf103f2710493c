"""A dataset's own training and test session files → the ``predefined`` split.

``load_predefined_split(name, root)`` finds the registered dataset's training file (its
``files``) and test file (its ``test_files``) under ``root`` as ``locate_in_root`` does,
verifies both against their registered sha256, reads each with its registered reader and
splits them with ``splits.predefined_split`` (every test prefix predicts its next item; the
SR-GNN protocol).

Session files are checked for what the generic readers would accept but a session cannot be;
each is a one-line ``DataFormatError`` naming the file and line (or session):

- an empty session: a blank line between two sessions of a one-session-per-line file, or an
  empty list in an SR-GNN pickle (``srgnn.read_srgnn_pickle``);
- a missing time (an empty or absent ``Time`` field) or a negative one in a session TSV.

A test session whose items never occur in training is not an error: SR-GNN's preprocessing
drops such clicks, and so does ``unseen_policy = "drop"``, counting them in the split's
protocol (``"keep"`` keeps them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from attnsvm.errors import shown
from attnsvm.rec.data import readers
from attnsvm.rec.data._parse import file_text, header_index, split_lines
from attnsvm.rec.data._tokens import Origin, floats
from attnsvm.rec.data.catalog import spec
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.sources import RawFile, locate_in_root
from attnsvm.rec.data.splits import Split, predefined_split


def check_session_lines(path: str | Path, text: str) -> None:
    """One session per line: a blank line before the last session is an empty session."""
    lines = text.split("\n")
    filled = [index for index, line in enumerate(lines, start=1) if line.strip()]
    if not filled:
        raise DataFormatError(path, "has no sessions")
    last = filled[-1]
    blank = next((i for i, line in enumerate(lines[:last], start=1) if not line.strip()), None)
    if blank is not None:
        raise DataFormatError(
            path, "is an empty session (a blank line; one session of 1 or more items a line)", blank
        )


def check_session_times(path: str | Path, text: str) -> None:
    """A session TSV's ``Time`` column: present on every line, a number, never negative."""
    header = [h.strip() for h in text.split("\n", 1)[0].split("\t")]
    column = header_index(path, header, {"time": "Time"})["time"]
    rows, numbers = split_lines(text, path, "\t", None, skip=1)
    for fields, line in zip(rows, numbers, strict=True):
        if len(fields) <= column or not fields[column].strip():
            raise DataFormatError(path, "has no time (the Time field is missing or empty)", line)
    times = floats([f[column] for f in rows], "time", Origin.per_row(path, numbers, False))
    negative = np.flatnonzero(times < 0)
    if negative.size:
        first = int(negative[0])
        token = shown(rows[first][column].strip())
        raise DataFormatError(path, f"time {token} is negative", int(numbers[first]))


def read_session_file(raw: RawFile) -> Interactions:
    """A located session file, verified, checked as the module docstring says, and read with
    its registered reader."""
    data, _ = raw.read(verify=True)
    if raw.file.reader is readers.read_session_lines:
        check_session_lines(raw.where, file_text(raw.where, data))
    elif raw.file.reader is readers.read_session_tsv:
        check_session_times(raw.where, file_text(raw.where, data))
    return raw.file.reader(raw.where, data)


def load_predefined_split(
    name: str,
    root: str | Path | None,
    valid_fraction: float = 0.1,
    unseen_policy: str = "drop",
) -> Split:
    """The registered dataset ``name``'s own train/test sessions under ``root``, split by
    ``splits.predefined_split``."""
    dataset = spec(name)
    if not dataset.test_files:
        raise DataFormatError(
            name,
            "ships no test sessions of its own: use data.split = 'session' (or 'temporal')",
        )
    if root is None:
        raise DataFormatError(name, "a predefined split reads its raw files: set data.root")
    train_raw = locate_in_root(dataset, Path(root))
    test_raw = locate_in_root(dataclasses.replace(dataset, files=dataset.test_files), Path(root))
    train = dataset.preprocess(read_session_file(train_raw))
    return predefined_split(train, read_session_file(test_raw), valid_fraction, unseen_policy)
