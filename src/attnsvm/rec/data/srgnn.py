"""SR-GNN's pickled session files (Wu et al., AAAI 2019: ``datasets/preprocess.py``), read
without running any code from them.

SR-GNN (and GCE-GNN, which ships its Diginetica output) pickles two files:

- ``all_train_seq.txt``: the training sessions, a ``list`` of sessions (lists of item ids);
- ``test.txt``: ``(prefixes, labels)``, the test sessions after ``process_seqs``: every prefix
  of a session predicts its next item, the longest prefix first.

Despite the extension both are pickles, of builtins only; ``load_builtins`` refuses anything
else (its unpickler's ``find_class`` raises), so a tampered file cannot run code.
``read_srgnn_pickle`` turns either into ``Interactions`` (one row per session; a test file is
turned back into its sessions and checked to be exactly ``process_seqs`` of them).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

from attnsvm.rec.data._parse import file_bytes
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.limits import EXPANDED_EVENTS


class _BuiltinsOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it names {module}.{name}; only builtins are accepted")


def load_builtins(path: str | Path, data: bytes) -> object:
    """The pickled value in ``data``, refused unless it is made of builtins only."""
    try:
        return _BuiltinsOnly(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as error:
        raise DataFormatError(path, f"is not a pickle of builtins ({error})") from None


def process_seqs(sessions: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """SR-GNN's augmentation: for each session ``s`` and ``i = 1 … len(s) − 1``, the prefix
    ``s[:-i]`` predicts ``s[-i]`` (the longest prefix first, as ``preprocess.py`` orders them)."""
    prefixes, labels = [], []
    for session in sessions:
        for i in range(1, len(session)):
            prefixes.append(session[:-i])
            labels.append(session[-i])
    return prefixes, labels


def sessions_from_samples(prefixes: list, labels: list, path: str | Path) -> list[list[int]]:
    """The sessions whose ``process_seqs`` augmentation is ``(prefixes, labels)``, in order: a
    session of n items gave n − 1 consecutive samples, its longest prefix first."""
    if len(prefixes) != len(labels):
        raise DataFormatError(path, f"has {len(prefixes)} prefixes but {len(labels)} labels")
    sessions, start = [], 0
    while start < len(prefixes):
        session = [*prefixes[start], labels[start]]
        count = len(session) - 1  # the samples this session gave
        for offset in range(count):
            sample = start + offset
            cut = len(session) - 1 - offset
            if sample >= len(prefixes) or (
                list(prefixes[sample]) != session[:cut] or labels[sample] != session[cut]
            ):
                raise DataFormatError(
                    path,
                    f"sample {sample} is not the next shorter prefix of the session that sample "
                    f"{start} begins: not SR-GNN process_seqs output",
                )
        sessions.append(session)
        start += count
    return sessions


def _check_expansion(path: str | Path, rows: object, name: str, plural: str) -> None:
    """Each of ``rows`` a non-empty list, and their lengths within ``limits.EXPANDED_EVENTS``,
    counted before any row is read: a pickle may hold one list by reference many times."""
    if not isinstance(rows, list):
        raise DataFormatError(path, f"its {plural} are not a list")
    total = 0
    for index, row in enumerate(rows, start=1):
        if not isinstance(row, list) or not row:
            raise DataFormatError(path, f"{name} {index} is empty or not a list of item ids")
        total += len(row)
    EXPANDED_EVENTS.check(path, total, f"its {plural} expand to")


def read_srgnn_pickle(path: str | Path, data: bytes | None = None) -> Interactions:
    """A pickled SR-GNN session file (a list of sessions, or a test file's ``(prefixes,
    labels)``) as one row per session; session ids are the 1-based session count."""
    value = load_builtins(path, file_bytes(path, data))
    if isinstance(value, tuple) and len(value) == 2:
        _check_expansion(path, value[0], "prefix", "prefixes")
        sessions = sessions_from_samples(*value, path)
    elif isinstance(value, list):
        sessions = value
    else:
        raise DataFormatError(path, "holds neither a list of sessions nor (prefixes, labels)")
    _check_expansion(path, sessions, "session", "sessions")
    for index, session in enumerate(sessions, start=1):
        if not all(type(item) is int and 0 < item < 2**63 for item in session):
            raise DataFormatError(
                path, f"session {index} holds an item id that is not an int64 > 0"
            )
    lengths = np.array([len(s) for s in sessions], dtype=np.int64)
    if lengths.size == 0:
        raise DataFormatError(path, "holds no sessions")
    items = np.fromiter((i for s in sessions for i in s), dtype=np.int64, count=int(lengths.sum()))
    session_ids = np.repeat(np.arange(1, lengths.size + 1), lengths)
    return Interactions.from_columns(session_ids, items, source=str(path))
