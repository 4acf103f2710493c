"""The fixed SR-GNN Diginetica split, read from ../shared/data, against SR-GNN's own counts and
pickles: 719,470 training prefixes, 60,858 test prefixes, 43,097 items."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from attnsvm.rec.data.batches import make_examples
from attnsvm.rec.data.sessions import load_predefined_split
from attnsvm.rec.data.srgnn import load_builtins, process_seqs

TRAIN_PREFIXES, TEST_PREFIXES, ITEMS = 719_470, 60_858, 43_097


@pytest.fixture(scope="module")
def diginetica(shared_data: Path) -> Path:
    folder = shared_data / "diginetica"
    if not (folder / "test.txt").exists():
        pytest.skip("../shared/data/diginetica is absent")
    return folder


@pytest.fixture(scope="module")
def whole_training(diginetica: Path):
    """The split with no validation carve (the library allows it; a run config asks for one),
    so training is every training session, as in SR-GNN's train.txt."""
    return load_predefined_split("diginetica", diginetica.parent, valid_fraction=0.0)


def _pickle(path: Path):
    return load_builtins(path, path.read_bytes())


def test_the_split_reproduces_sr_gnn_counts(whole_training, diginetica: Path) -> None:
    split = whole_training
    assert split.num_items == ITEMS
    assert len(split.test) == TEST_PREFIXES
    assert len(split.valid) == 0
    # every prefix of a training session is one example of the stride-1 "last" objective
    assert len(make_examples(split.train, "last")) == TRAIN_PREFIXES
    assert "0 test clicks on items unseen in training dropped" in split.protocol
    assert "0 test sessions under 2 items left out" in split.protocol
    # SR-GNN's own augmentation of its training pickle gives the same count
    prefixes, _ = process_seqs(_pickle(diginetica / "all_train_seq.txt"))
    assert len(prefixes) == TRAIN_PREFIXES


def test_the_test_prefixes_are_sr_gnn_test_file(whole_training, diginetica: Path) -> None:
    """Each (prefix, label) of test.txt is one of the split's test rows, and vice versa."""
    prefixes, labels = _pickle(diginetica / "test.txt")
    theirs = Counter((tuple(p), label) for p, label in zip(prefixes, labels, strict=True))
    test = whole_training.test
    item_ids = whole_training.item_ids  # internal → external (the file's) item id
    ours = Counter(
        (tuple(item_ids[test.history.row(r)].tolist()), int(item_ids[test.targets.row(r)[0]]))
        for r in range(len(test))
    )
    assert ours == theirs
    assert np.all(test.exclude.lengths == 0)  # the session protocol excludes nothing
    assert np.all(test.targets.lengths == 1)


def test_the_pickles_alone_give_the_same_split(diginetica: Path, tmp_path: Path) -> None:
    """SR-GNN's pickles, where the derived text files are absent, are read to the same split."""
    folder = tmp_path / "diginetica"
    folder.mkdir()
    for name in ("all_train_seq.txt", "test.txt"):
        (folder / name).symlink_to(diginetica / name)
    from_pickles = load_predefined_split("diginetica", tmp_path, valid_fraction=0.1)
    from_text = load_predefined_split("diginetica", diginetica.parent, valid_fraction=0.1)
    assert from_pickles.num_items == from_text.num_items == ITEMS
    for stage in ("valid", "test"):
        a, b = getattr(from_pickles, stage), getattr(from_text, stage)
        assert np.array_equal(a.history.items, b.history.items)
        assert np.array_equal(a.targets.items, b.targets.items)
    assert np.array_equal(from_pickles.train.items, from_text.train.items)


def test_validation_is_the_latest_training_sessions(whole_training, diginetica: Path) -> None:
    """valid_fraction carves the last training sessions (SR-GNN's date order), not test ones."""
    split = load_predefined_split("diginetica", diginetica.parent, valid_fraction=0.1)
    sessions = 186_670
    assert len(split.train) == sessions - round(sessions * 0.1)
    assert len(split.test) == TEST_PREFIXES
    # validation rows belong to training sessions: user ids below the test sessions'
    assert split.valid.users.max() < split.test.users.min()
    assert split.train.users.max() < split.valid.users.min()
