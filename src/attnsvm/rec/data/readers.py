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
  ``read_table``  any CSV/TSV/Parquet with a column mapping
No reader unpickles anything.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from attnsvm._atomic import write_text
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# -- bytes → text → rows -------------------------------------------------------------------


def _bytes(path: str | Path, data: bytes | None) -> bytes:
    """The file's bytes (``data`` when given); an empty file is an error."""
    if data is None:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            raise DataFormatError(path, "no such file") from None
        except IsADirectoryError:
            raise DataFormatError(path, "is a directory, not a file") from None
        except OSError as error:
            raise DataFormatError(path, f"cannot be read ({error.strerror})") from None
    if not data.strip():
        raise DataFormatError(path, "is empty")
    return data


def _text(path: str | Path, data: bytes | None) -> str:
    """The file decoded as strict UTF-8 (BOM and CRLF tolerated)."""
    data = _bytes(path, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise DataFormatError(
            path, f"is not valid UTF-8 (byte 0x{data[error.start]:02x} at column {column})", line
        ) from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n")


def _fast_columns(data: bytes, sep: str, schema: dict, skip: int) -> list[np.ndarray] | None:
    """Clean files parse in polars' native reader. Anything it doubts (an exception, a null, a
    non-finite number, a CR or BOM, no rows) returns None, and the caller reads line by line,
    which names the first bad line: the fast path never decides an error itself."""
    if b"\r" in data or data.startswith(b"\xef\xbb\xbf"):
        return None
    if len(sep) > 1:  # polars takes one-byte separators: '::' becomes the unit separator
        if b"\x1f" in data:
            return None
        data, sep = data.replace(sep.encode(), b"\x1f"), "\x1f"
    try:
        frame = pl.read_csv(
            io.BytesIO(data),
            separator=sep,
            has_header=False,
            skip_rows=skip,
            schema=schema,
            quote_char=None,
        )
    except Exception:  # any parse problem: the line-by-line reader reports it precisely
        return None
    if frame.height == 0 or frame.null_count().sum_horizontal().item():
        return None
    columns = [frame.get_column(name).to_numpy() for name in schema]
    if any(c.dtype.kind == "f" and not np.isfinite(c).all() for c in columns):
        return None
    return columns


def _split(
    text: str, path: str | Path, sep: str | None, width: int | None, skip: int = 0
) -> tuple[list[list[str]], np.ndarray]:
    """Non-blank lines (after ``skip`` header lines) split on ``sep`` (None: any whitespace).

    Returns the field lists and each one's 1-based line number. With ``width`` every line must
    have exactly that many fields.
    """
    rows, numbers = [], []
    for index, line in enumerate(text.split("\n")[skip:], start=skip + 1):
        if not line.strip():
            continue
        fields = line.split(sep)
        if width is not None and len(fields) != width:
            shown = "whitespace" if sep is None else repr(sep)
            raise DataFormatError(
                path, f"expected {width} fields separated by {shown}, found {len(fields)}", index
            )
        rows.append(fields)
        numbers.append(index)
    if not rows:
        raise DataFormatError(path, "has no data lines")
    return rows, np.asarray(numbers, dtype=np.int64)


def _header_hint(line: int) -> str:
    return " (line 1 looks like a header; this format has none)" if line == 1 else ""


def _integers(
    tokens: Sequence[str],
    path: str | Path,
    what: str,
    line_of: Callable[[int], int],
    header_hint: bool = True,
) -> np.ndarray:
    """Tokens as int64; on failure, name the first bad token and its line."""
    try:
        return np.array(tokens, dtype=np.int64)
    except (ValueError, OverflowError):
        pass
    values = []
    for index, token in enumerate(tokens):
        try:
            value = int(token)
            ok = _INT64_MIN <= value <= _INT64_MAX
        except ValueError:
            ok = False
        if not ok:
            line = line_of(index)
            hint = _header_hint(line) if header_hint else ""
            raise DataFormatError(path, f"{what} {token.strip()!r} is not an integer{hint}", line)
        values.append(value)
    return np.array(values, dtype=np.int64)


def _floats(
    tokens: Sequence[str],
    path: str | Path,
    what: str,
    line_of: Callable[[int], int],
    header_hint: bool = True,
) -> np.ndarray:
    """Tokens as finite float64; on failure, name the first bad token and its line."""
    try:
        values = np.array(tokens, dtype=np.float64)
    except ValueError:
        parsed = []
        for index, token in enumerate(tokens):
            try:
                parsed.append(float(token))
            except ValueError:
                line = line_of(index)
                hint = _header_hint(line) if header_hint else ""
                raise DataFormatError(
                    path, f"{what} {token.strip()!r} is not a number{hint}", line
                ) from None
        values = np.array(parsed, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        index = int(bad[0])
        raise DataFormatError(
            path, f"{what} {tokens[index].strip()!r} is not finite", line_of(index)
        )
    return values


def _tokens(tokens: Sequence[str]) -> np.ndarray:
    """Free-form id tokens (RecBole ``:token``, generic tables): int64 when all are integers."""
    try:
        return np.array(tokens, dtype=np.int64)
    except (ValueError, OverflowError):
        return np.array([t.strip() for t in tokens], dtype=str)


def _columns(rows: list[list[str]]) -> list[tuple[str, ...]]:
    return list(zip(*rows, strict=True))


def _rowwise(numbers: np.ndarray) -> Callable[[int], int]:
    return lambda index: int(numbers[index])


# -- MovieLens ------------------------------------------------------------------------------


def _rating_table(path: str | Path, data: bytes | None, sep: str, skip: int) -> Interactions:
    """``user sep item sep rating sep timestamp`` rows (the three MovieLens layouts)."""
    data = _bytes(path, data)
    text = _text(path, data)
    schema = {"user": pl.Int64, "item": pl.Int64, "rating": pl.Float64, "timestamp": pl.Float64}
    fast = _fast_columns(data, sep, schema, skip)
    if fast is not None:
        user, item, rating, timestamp = fast
        return Interactions.from_columns(user, item, timestamp, rating, source=str(path))
    rows, numbers = _split(text, path, sep, 4, skip=skip)
    user, item, rating, timestamp = _columns(rows)
    line_of = _rowwise(numbers)
    hint = skip == 0
    return Interactions.from_columns(
        user=_integers(user, path, "user id", line_of, hint),
        item=_integers(item, path, "item id", line_of, hint),
        rating=_floats(rating, path, "rating", line_of, hint),
        timestamp=_floats(timestamp, path, "timestamp", line_of, hint),
        source=str(path),
    )


def read_movielens_dat(path: str | Path, data: bytes | None = None) -> Interactions:
    """ML-1M / ML-10M ``ratings.dat``: ``UserID::MovieID::Rating::Timestamp``, no header."""
    return _rating_table(path, data, "::", skip=0)


def read_movielens_udata(path: str | Path, data: bytes | None = None) -> Interactions:
    """ML-100K ``u.data``: tab-separated ``user item rating timestamp``, no header."""
    return _rating_table(path, data, "\t", skip=0)


def read_movielens_csv(path: str | Path, data: bytes | None = None) -> Interactions:
    """ML-latest / ML-20M ``ratings.csv``: header ``userId,movieId,rating,timestamp``."""
    data = _bytes(path, data)
    header = _text(path, data).split("\n", 1)[0].strip()
    if header != "userId,movieId,rating,timestamp":
        raise DataFormatError(
            path, f"expected the header 'userId,movieId,rating,timestamp', found {header!r}", 1
        )
    return _rating_table(path, data, ",", skip=1)


# -- per-user, pairs and session text --------------------------------------------------------


def read_per_user(path: str | Path, data: bytes | None = None) -> Interactions:
    """``user item1 item2 ...`` per line (whitespace-separated), items in time order."""
    text = _text(path, data)
    lines = text.split("\n")
    users, lengths, numbers, items = [], [], [], []
    for index, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 2:
            raise DataFormatError(
                path, f"user {fields[0]!r} has no items (expected 'user item1 item2 ...')", index
            )
        users.append(fields[0])
        lengths.append(len(fields) - 1)
        numbers.append(index)
        items.extend(fields[1:])
    if not users:
        raise DataFormatError(path, "has no data lines")
    numbers_arr = np.asarray(numbers, dtype=np.int64)
    ends = np.cumsum(lengths)
    user = _integers(users, path, "user id", _rowwise(numbers_arr))
    item = _integers(
        items,
        path,
        "item id",
        lambda k: int(numbers_arr[np.searchsorted(ends, k, side="right")]),
    )
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
    data = _bytes(path, data)
    text = _text(path, data)
    fast = _fast_columns(data, " ", {"user": pl.Int64, "item": pl.Int64}, 0)
    if fast is not None:
        return Interactions.from_columns(*fast, source=str(path))
    rows, numbers = _split(text, path, None, 2)
    user, item = _columns(rows)
    line_of = _rowwise(numbers)
    return Interactions.from_columns(
        _integers(user, path, "user id", line_of),
        _integers(item, path, "item id", line_of),
        source=str(path),
    )


def read_session_lines(path: str | Path, data: bytes | None = None) -> Interactions:
    """One session per line, ``item1 item2 ...``; session ids are the 1-based data-line count."""
    rows, numbers = _split(_text(path, data), path, None, None)
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    ends = np.cumsum(lengths)
    items = [token for row in rows for token in row]
    item = _integers(
        items, path, "item id", lambda k: int(numbers[np.searchsorted(ends, k, side="right")])
    )
    session = np.repeat(np.arange(1, len(rows) + 1), lengths)
    return Interactions.from_columns(session, item, source=str(path))


# -- header-driven tables -------------------------------------------------------------------


def _header_index(path: str | Path, header: list[str], wanted: dict[str, str | None]) -> dict:
    """Column index of each wanted role (role → header name); a clear error if one is missing."""
    index = {}
    for role, name in wanted.items():
        if name is None:
            continue
        if name not in header:
            raise DataFormatError(
                path, f"has no {role} column {name!r} (header: {', '.join(header)})", 1
            )
        index[role] = header.index(name)
    return index


def _from_mapped(
    path: str | Path,
    rows: list[list[str]],
    numbers: np.ndarray,
    index: dict[str, int],
    numeric_ids: bool,
) -> Interactions:
    columns = _columns(rows)
    line_of = _rowwise(numbers)

    def ids(role: str) -> np.ndarray:
        tokens = columns[index[role]]
        if numeric_ids:
            return _integers(tokens, path, f"{role} id", line_of, header_hint=False)
        return _tokens(tokens)

    def numbers_of(role: str) -> np.ndarray | None:
        if role not in index:
            return None
        return _floats(columns[index[role]], path, role, line_of, header_hint=False)

    return Interactions.from_columns(
        ids("user"),
        ids("item"),
        timestamp=numbers_of("timestamp"),
        rating=numbers_of("rating"),
        source=str(path),
    )


def read_session_tsv(path: str | Path, data: bytes | None = None) -> Interactions:
    """session-rec TSV: tab-separated, header naming ``SessionId``, ``ItemId`` and ``Time``."""
    text = _text(path, data)
    header = [h.strip() for h in text.split("\n", 1)[0].split("\t")]
    index = _header_index(
        path, header, {"session": "SessionId", "item": "ItemId", "timestamp": "Time"}
    )
    rows, numbers = _split(text, path, "\t", len(header), skip=1)
    index["user"] = index.pop("session")
    return _from_mapped(path, rows, numbers, index, numeric_ids=True)


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
    text = _text(path, data)
    header_line = text.split("\n", 1)[0]
    names = []
    for field in header_line.split("\t"):
        name, colon, kind = field.strip().partition(":")
        if not colon or kind not in ("token", "float", "token_seq", "float_seq"):
            raise DataFormatError(
                path,
                f"header field {field.strip()!r} is not 'name:type' with type token, float, "
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
    index = _header_index(path, names, wanted)
    rows, numbers = _split(text, path, "\t", len(names), skip=1)
    return _from_mapped(path, rows, numbers, index, numeric_ids=False)


def read_table(
    path: str | Path,
    *,
    user: str | int,
    item: str | int,
    timestamp: str | int | None = None,
    rating: str | int | None = None,
    sep: str | None = None,
    header: bool = True,
    data: bytes | None = None,
) -> Interactions:
    """Any CSV/TSV/Parquet: name (or, without a header, 0-based index) the columns to use.

    ``sep`` defaults to ',' for ``.csv`` and a tab otherwise. Ids may be any tokens.
    """
    path_str = str(path)
    wanted = {"user": user, "item": item, "timestamp": timestamp, "rating": rating}
    if path_str.endswith(".parquet"):
        return _read_parquet(path, wanted, data)
    text = _text(path, data)
    sep = sep if sep is not None else ("," if path_str.endswith(".csv") else "\t")
    if header:
        names = [h.strip() for h in text.split("\n", 1)[0].split(sep)]
        index = _header_index(
            path, names, {r: c for r, c in wanted.items() if c is None or isinstance(c, str)}
        )
        index |= {r: c for r, c in wanted.items() if isinstance(c, int)}
        width = len(names)
    else:
        if not all(c is None or isinstance(c, int) for c in wanted.values()):
            raise ValueError("without a header, columns are given by 0-based index")
        index = {r: c for r, c in wanted.items() if c is not None}
        width = None
    rows, numbers = _split(text, path, sep, width, skip=1 if header else 0)
    needed = max(index.values()) + 1
    short = next((k for k, r in enumerate(rows) if len(r) < needed), None)
    if short is not None:
        raise DataFormatError(
            path,
            f"has {len(rows[short])} fields, column {needed - 1} is needed",
            int(numbers[short]),
        )
    rows = [r[:needed] for r in rows] if width is None else rows
    return _from_mapped(path, rows, numbers, index, numeric_ids=False)


def _read_parquet(path: str | Path, wanted: dict, data: bytes | None) -> Interactions:
    try:
        frame = pl.read_parquet(io.BytesIO(data) if data is not None else path)
    except FileNotFoundError:
        raise DataFormatError(path, "no such file") from None
    except Exception as error:  # polars raises several types; all mean "not a parquet file"
        raise DataFormatError(
            path, f"is not a readable Parquet file ({type(error).__name__})"
        ) from None
    columns = {}
    for role, name in wanted.items():
        if name is None:
            continue
        key = frame.columns[name] if isinstance(name, int) else name
        if key not in frame.columns:
            raise DataFormatError(
                path, f"has no {role} column {key!r} (columns: {', '.join(frame.columns)})"
            )
        series = frame.get_column(key)
        if series.null_count():
            row = int(series.is_null().arg_true()[0])
            raise DataFormatError(path, f"{role} column {key!r} is null in row {row + 1}")
        columns[role] = series.to_numpy()
    for role in ("timestamp", "rating"):
        if role in columns:
            if columns[role].dtype.kind not in "iuf":
                raise DataFormatError(path, f"{role} column is not numeric")
            columns[role] = columns[role].astype(np.float64)
    return Interactions.from_columns(
        columns["user"],
        columns["item"],
        columns.get("timestamp"),
        columns.get("rating"),
        source=str(path),
    )


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
    text = _text(path, None)
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
