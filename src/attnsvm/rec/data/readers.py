"""Readers: one function per file format, each returning ``Interactions``.

Every reader takes ``path`` and, optionally, the file's bytes (``data``, for archive members;
``path`` then only names them in messages). Malformed input raises ``DataFormatError`` naming
the file and the 1-based line; no reader lets a parsing library's traceback escape. Blank lines
are skipped (they carry no events), but they still count in the line numbers.

Formats:
  ``read_movielens_dat``  ML-1M/10M ``ratings.dat``: ``user::item::rating::timestamp``
  ``read_movielens_udata``  ML-100K ``u.data``: tab-separated ``user item rating timestamp``
  ``read_movielens_csv``  ML-latest/20M ``ratings.csv``: header ``userId,movieId,rating,timestamp``
  ``read_per_user``  ``user item1 item2 ...`` per line, in time order (S3-Rec, FMLP-Rec);
                     ``write_per_user`` writes it
  ``read_pairs``  ``user item`` per line, in time order per user (SASRec, BERT4Rec)
  ``read_recbole_inter``  RecBole atomic ``.inter``: tab-separated, typed header ``user_id:token``
  ``read_session_tsv``  session-rec TSV with header ``SessionId ItemId Time``
  ``read_session_lines``  one session per line, ``item1 item2 ...`` (SR-GNN derived text)
  ``read_table``  any CSV/TSV/Parquet with a column mapping (``tables``, re-exported here)
  ``read_auto``  picks one of the above from the file name and first line
No reader unpickles anything. The shared parsing (decoding, splitting) is ``_parse``'s, the typed
columns ``_tokens``', one rule for every format: an integer id is ASCII digits, optionally after
"-" (``+10``, ``1_0`` and ``١٠`` are refused where ids are numbers, and kept as text, distinct
from ``10``, where ids are free-form: RecBole and tables); numbers and times are ASCII (no "_",
no other scripts' digits); a time column of integers is read as int64 and orders the rows
exactly, beyond 2**53 too. This module only knows the layouts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from attnsvm._atomic import write_text
from attnsvm.errors import shown
from attnsvm.rec.data._parse import (
    fast_columns,
    file_bytes,
    file_text,
    from_mapped,
    header_index,
    split_lines,
    transpose,
)
from attnsvm.rec.data._tokens import (
    Origin,
    floats,
    integers,
    time_columns,
    unix_seconds,
    unix_times,
)
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.tables import read_table as read_table  # the Python API's place

# -- MovieLens ------------------------------------------------------------------------------


def _rating_table(path: str | Path, data: bytes | None, sep: str, skip: int) -> Interactions:
    """``user sep item sep rating sep timestamp`` rows (the three MovieLens layouts)."""
    data = file_bytes(path, data)
    text = file_text(path, data)
    schema = {"user": pl.Int64, "item": pl.Int64, "rating": pl.Float64, "timestamp": pl.Int64}
    fast = fast_columns(data, sep, schema, skip)
    if fast is not None:
        user, item, rating, timestamp = fast
        when = time_columns(unix_seconds(timestamp, "s"))
        return Interactions.from_columns(user, item, rating=rating, source=str(path), **when)
    rows, numbers = split_lines(text, path, sep, 4, skip=skip)
    user, item, rating, timestamp = transpose(rows)
    # the CSV layout has a header: a bad line 1 there is no stray header to point out
    origin = Origin.per_row(path, numbers, header_hint=skip == 0)
    return Interactions.from_columns(
        user=integers(user, "user id", origin),
        item=integers(item, "item id", origin),
        rating=floats(rating, "rating", origin),
        source=str(path),
        **time_columns(unix_times(timestamp, "timestamp", origin)),
    )


def read_movielens_dat(path: str | Path, data: bytes | None = None) -> Interactions:
    """ML-1M / ML-10M ``ratings.dat``: ``UserID::MovieID::Rating::Timestamp``, no header."""
    return _rating_table(path, data, "::", skip=0)


def read_movielens_udata(path: str | Path, data: bytes | None = None) -> Interactions:
    """ML-100K ``u.data``: tab-separated ``user item rating timestamp``, no header."""
    return _rating_table(path, data, "\t", skip=0)


def read_movielens_csv(path: str | Path, data: bytes | None = None) -> Interactions:
    """ML-latest / ML-20M ``ratings.csv``: header ``userId,movieId,rating,timestamp``."""
    data = file_bytes(path, data)
    header = file_text(path, data).split("\n", 1)[0].strip()
    if header != "userId,movieId,rating,timestamp":
        raise DataFormatError(
            path, f"expected the header 'userId,movieId,rating,timestamp', found {shown(header)}", 1
        )
    return _rating_table(path, data, ",", skip=1)


# -- per-user, pairs and session text --------------------------------------------------------


def read_per_user(path: str | Path, data: bytes | None = None) -> Interactions:
    """``user item1 item2 ...`` per line (whitespace-separated), items in time order."""
    text = file_text(path, data)
    lines = text.split("\n")
    users, lengths, numbers, items = [], [], [], []
    for index, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 2:
            raise DataFormatError(
                path,
                f"user {shown(fields[0])} has no items (expected 'user item1 item2 ...')",
                index,
            )
        users.append(fields[0])
        lengths.append(len(fields) - 1)
        numbers.append(index)
        items.extend(fields[1:])
    if not users:
        raise DataFormatError(path, "has no data lines")
    numbers_arr = np.asarray(numbers, dtype=np.int64)
    user = integers(users, "user id", Origin.per_row(path, numbers_arr))
    item = integers(items, "item id", Origin.per_span(path, numbers_arr, lengths))
    unique, first, counts = np.unique(user, return_index=True, return_counts=True)
    if np.any(counts > 1):
        again = int(np.flatnonzero(counts > 1)[0])
        repeats = np.flatnonzero(user == unique[again])
        raise DataFormatError(
            path,
            f"user {unique[again]} has a second line (first on line {numbers_arr[first[again]]}); "
            "the per-user format has one line per user",
            int(numbers_arr[repeats[1]]),
        )
    return Interactions.from_columns(np.repeat(user, lengths), item, source=str(path))


def write_per_user(data: Interactions, path: str | Path) -> Path:
    """``data`` in ``read_per_user``'s format (external ids, rows in their stored order), written
    to a temporary file and renamed into place."""
    path = Path(path)
    users = data.user_ids[data.user]
    items = data.item_ids[data.item]
    bounds = data.offsets[1:-1]
    lines = [
        " ".join(map(str, [row_users[0], *row_items])) + "\n"
        for row_users, row_items in zip(
            np.split(users, bounds), np.split(items, bounds), strict=True
        )
    ]
    write_text(path, "".join(lines))
    return path


def read_pairs(path: str | Path, data: bytes | None = None) -> Interactions:
    """``user item`` per line (whitespace-separated), in time order within each user."""
    data = file_bytes(path, data)
    text = file_text(path, data)
    fast = fast_columns(data, " ", {"user": pl.Int64, "item": pl.Int64}, 0)
    if fast is not None:
        return Interactions.from_columns(*fast, source=str(path))
    rows, numbers = split_lines(text, path, None, 2)
    user, item = transpose(rows)
    origin = Origin.per_row(path, numbers)
    return Interactions.from_columns(
        integers(user, "user id", origin),
        integers(item, "item id", origin),
        source=str(path),
    )


def read_session_lines(path: str | Path, data: bytes | None = None) -> Interactions:
    """One session per line, ``item1 item2 ...``; session ids are the 1-based data-line count."""
    rows, numbers = split_lines(file_text(path, data), path, None, None)
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    items = [token for row in rows for token in row]
    item = integers(items, "item id", Origin.per_span(path, numbers, lengths))
    session = np.repeat(np.arange(1, len(rows) + 1), lengths)
    return Interactions.from_columns(session, item, source=str(path))


# -- header-driven tables -------------------------------------------------------------------


def read_session_tsv(path: str | Path, data: bytes | None = None) -> Interactions:
    """session-rec TSV: tab-separated, header naming ``SessionId``, ``ItemId`` and ``Time``."""
    text = file_text(path, data)
    header = [h.strip() for h in text.split("\n", 1)[0].split("\t")]
    index = header_index(
        path, header, {"session": "SessionId", "item": "ItemId", "timestamp": "Time"}
    )
    rows, numbers = split_lines(text, path, "\t", len(header), skip=1)
    index["user"] = index.pop("session")
    return from_mapped(path, rows, numbers, index, numeric_ids=True)


def read_recbole_inter(
    path: str | Path,
    data: bytes | None = None,
    *,
    user_field: str = "user_id",
    item_field: str = "item_id",
    time_field: str | None = "timestamp",
    rating_field: str | None = "rating",
) -> Interactions:
    """RecBole atomic ``.inter``: tab-separated, header ``name:type`` (token/float/…_seq).

    The time and rating fields are optional (used when present).
    """
    text = file_text(path, data)
    header_line = text.split("\n", 1)[0]
    names = []
    for field in header_line.split("\t"):
        name, colon, kind = field.strip().partition(":")
        if not colon or kind not in ("token", "float", "token_seq", "float_seq"):
            raise DataFormatError(
                path,
                f"header field {shown(field.strip())} is not 'name:type' with type token, float, "
                "token_seq or float_seq (RecBole atomic files have a typed header)",
                1,
            )
        names.append(name)
    wanted = {
        "user": user_field,
        "item": item_field,
        "timestamp": time_field if time_field in names else None,
        "rating": rating_field if rating_field in names else None,
    }
    index = header_index(path, names, wanted)
    rows, numbers = split_lines(text, path, "\t", len(names), skip=1)
    return from_mapped(path, rows, numbers, index, numeric_ids=False)


# -- format detection -----------------------------------------------------------------------


def read_auto(path: str | Path) -> Interactions:
    """Pick the reader from the file name, then from the first line."""
    path = Path(path)
    name = path.name
    if name.endswith(".dat"):
        return read_movielens_dat(path)
    if name == "u.data":
        return read_movielens_udata(path)
    if name.endswith(".inter"):
        return read_recbole_inter(path)
    if name.endswith(".parquet"):
        raise DataFormatError(path, "is Parquet: call read_table with a column mapping")
    text = file_text(path, None)
    first = text.split("\n", 1)[0]
    if first.strip() == "userId,movieId,rating,timestamp":
        return read_movielens_csv(path, text.encode())
    if "SessionId" in first.split("\t"):
        return read_session_tsv(path, text.encode())
    widths = {len(line.split()) for line in text.split("\n") if line.strip()}
    if widths == {2}:
        pairs = read_pairs(path, text.encode())
        if np.any(np.diff(pairs.offsets) > 1):
            return pairs
    return read_per_user(path, text.encode())
