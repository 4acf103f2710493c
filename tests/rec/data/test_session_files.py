"""Session files and the predefined split on hand-made files: what each prefix predicts, how
validation is carved, and every bad input as a one-line error naming the file and line, or a
counted skip."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from attnsvm.rec.config import ConfigError, DataConfig, RunConfig, apply_overrides
from attnsvm.rec.data import readers
from attnsvm.rec.data.catalog import SourceFile
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.sessions import load_predefined_split, read_session_file
from attnsvm.rec.data.sources import RawFile
from attnsvm.rec.data.splits import predefined_split
from attnsvm.rec.data.srgnn import process_seqs, read_srgnn_pickle

TSV_HEADER = "SessionId\tItemId\tTime\n"


def _read(path: Path, reader) -> Interactions:
    return read_session_file(RawFile(SourceFile(path.name, reader), path))


def _sessions(rows: list[list[int]], times: list[list[float]] | None = None) -> Interactions:
    session = np.repeat(np.arange(1, len(rows) + 1), [len(r) for r in rows])
    items = np.array([i for r in rows for i in r])
    flat_times = None if times is None else np.array([t for r in times for t in r], dtype=float)
    return Interactions.from_columns(session, items, flat_times)


def _rows(seqs) -> list[list[int]]:
    return seqs.to_lists()


# -- the split ------------------------------------------------------------------------------


def test_every_test_prefix_predicts_its_next_item() -> None:
    train = _sessions([[10, 20, 30], [20, 30], [30, 40, 10]])
    test = _sessions([[20, 30, 40], [40, 10]])
    split = predefined_split(train, test, valid_fraction=0.0)
    # internal ids: 10 → 1, 20 → 2, 30 → 3, 40 → 4
    assert _rows(split.test.history) == [[2], [2, 3], [4]]
    assert _rows(split.test.targets) == [[3], [4], [1]]
    assert np.all(split.test.exclude.lengths == 0)
    # test sessions are users after the training ones (a kNN never finds them among its own)
    assert split.test.users.tolist() == [3, 3, 4]
    assert split.num_items == 4 and split.num_users == 5


def test_validation_is_the_latest_training_sessions_by_start_time() -> None:
    train = _sessions(
        [[1, 2, 3], [2, 3], [3, 1, 2], [1, 3]], times=[[5, 6, 7], [1, 2], [9, 9, 9], [3, 4]]
    )
    split = predefined_split(train, _sessions([[1, 2]]), valid_fraction=0.5)
    # by start: session 2 (t=1), 4 (t=3), 1 (t=5), 3 (t=9); the last half is validation
    assert _rows(split.train) == [[2, 3], [1, 3]]
    assert split.valid.users.tolist() == [0, 0, 2, 2]
    assert _rows(split.valid.targets) == [[2], [3], [1], [2]]
    assert split.train.times is not None  # the times travel with the training rows


def test_unseen_test_items_are_dropped_and_counted() -> None:
    train = _sessions([[1, 2, 3], [2, 3]])
    test = _sessions([[1, 9, 2], [9, 3], [8, 8]])
    split = predefined_split(train, test, valid_fraction=0.0)
    assert _rows(split.test.history) == [[1]]  # [1, 9, 2] loses 9; the others fall under 2
    assert _rows(split.test.targets) == [[2]]
    assert "4 test clicks on items unseen in training dropped" in split.protocol
    assert "2 test sessions under 2 items left out" in split.protocol


def test_unseen_test_items_can_be_kept_in_the_catalogue() -> None:
    train = _sessions([[1, 2, 3], [2, 3]])
    split = predefined_split(train, _sessions([[1, 9, 2]]), 0.0, unseen_policy="keep")
    assert split.num_items == 4 and split.item_ids.tolist() == [0, 1, 2, 3, 9]
    assert _rows(split.test.history) == [[1], [1, 4]]
    assert "1 test clicks on items unseen in training kept" in split.protocol


# -- bad input ------------------------------------------------------------------------------


def test_a_negative_time_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "clicks.tsv"
    path.write_text(TSV_HEADER + "1\t5\t10.0\n1\t6\t-3.5\n")
    with pytest.raises(DataFormatError, match=r"clicks.tsv:3: time '-3.5' is negative"):
        _read(path, readers.read_session_tsv)


@pytest.mark.parametrize("row", ["1\t6\t", "1\t6"])
def test_a_missing_time_names_its_line(tmp_path: Path, row: str) -> None:
    path = tmp_path / "clicks.tsv"
    path.write_text(TSV_HEADER + "1\t5\t10.0\n" + row + "\n")
    with pytest.raises(DataFormatError, match=r"clicks.tsv:3: has no time"):
        _read(path, readers.read_session_tsv)


def test_a_good_session_tsv_is_read_with_its_times(tmp_path: Path) -> None:
    path = tmp_path / "clicks.tsv"
    path.write_text(TSV_HEADER + "1\t5\t10.0\n1\t6\t0\n2\t5\t3\n")
    data = _read(path, readers.read_session_tsv)
    assert data.to_sequences().to_lists() == [[2, 1], [1]]  # ordered by time in each session


def test_an_empty_session_line_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "sessions.txt"
    path.write_text("1 2 3\n\n4 5\n\n")  # the trailing blank line ends the file: no session
    with pytest.raises(DataFormatError, match=r"sessions.txt:2: is an empty session"):
        _read(path, readers.read_session_lines)
    path.write_text("1 2 3\n4 5\n\n")
    assert len(_read(path, readers.read_session_lines).to_sequences()) == 2


def test_an_empty_session_in_a_pickle_names_the_session(tmp_path: Path) -> None:
    path = tmp_path / "all_train_seq.txt"
    path.write_bytes(pickle.dumps([[1, 2], [], [3]]))
    with pytest.raises(DataFormatError, match=r"all_train_seq.txt: session 2 is empty"):
        read_srgnn_pickle(path)


def test_a_pickle_naming_a_class_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "test.txt"
    path.write_bytes(pickle.dumps((Path("x"), [1])))
    with pytest.raises(DataFormatError, match="is not a pickle of builtins"):
        read_srgnn_pickle(path)


def test_a_test_pickle_is_read_back_into_its_sessions(tmp_path: Path) -> None:
    sessions = [[5, 6, 7], [6, 5], [7, 7, 5, 6]]
    path = tmp_path / "test.txt"
    path.write_bytes(pickle.dumps(process_seqs(sessions)))
    data = read_srgnn_pickle(path)
    assert data.item_ids[data.to_sequences().items].tolist() == [i for s in sessions for i in s]
    prefixes, labels = process_seqs(sessions)
    path.write_bytes(pickle.dumps((prefixes, [labels[0], 99, *labels[2:]])))
    with pytest.raises(DataFormatError, match="sample 1 is not the next shorter prefix"):
        read_srgnn_pickle(path)


def test_a_dataset_without_test_sessions_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="ships no test sessions of its own"):
        load_predefined_split("ml-100k", tmp_path)


def test_a_predefined_run_needs_a_root_and_a_validation_carve() -> None:
    config = RunConfig(data=DataConfig(dataset="diginetica"))
    with pytest.raises(ConfigError, match=r"set data\.root"):
        apply_overrides(config, ["data.split=predefined"])
    with pytest.raises(ConfigError, match=r"needs data\.valid_fraction > 0"):
        apply_overrides(config, ["data.split=predefined", "data.root=x", "data.valid_fraction=0"])
    chosen = apply_overrides(config, ["data.split=predefined", "data.root=x"])
    assert chosen.data.split == "predefined"
