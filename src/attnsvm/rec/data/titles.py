"""Item titles (and categories) for showing recommendations to people.

``read_item_titles`` reads them from

- a table of one's own: a CSV, TSV or Parquet file (plain or gzipped, read as ``tables`` reads
  an interaction file) or a DataFrame (pandas, polars, a pyarrow Table), with a column mapping
  ``item=sku,title=name,category=cat`` (``category`` optional; a 0-based index for a column
  of a file without a header). A row without an item or a title is skipped; an item given
  twice is an error naming both rows;
- MovieLens ``movies.dat``, ``u.item`` and ``movies.csv`` (read by ``features``, which owns
  those formats): the title, and the genres as the category;
- ``id<TAB>title`` (or ``id::title``) lines;
- ``item_titles.parquet`` (``item_titles.TITLES_FILE``), the copy a prepared table of one's own
  keeps in its folder of the cache when it was prepared with titles (``datasets.prepare_table``
  and ``prepare_frame``), where ``find_titles`` finds it; re-preparing the name replaces the
  folder, titles and all.

Titles are keyed by the item id as text (the external id), so they pair with a run's
``id_maps.json`` whatever internal ids the run gave the items; a table's item column is typed
as an interaction table's is (``frames``), so an id reads the same in both (``7`` is 7,
``007`` stays the text ``007``). ``ItemTitles`` (in ``item_titles``, which the cache's writer
imports without these readers) holds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl

from attnsvm._files import read_bytes
from attnsvm.errors import InvalidRequest, UnreadableFile, shown
from attnsvm.rec.data._parse import blank
from attnsvm.rec.data._tokens import Origin
from attnsvm.rec.data.cleaning import Cleaning
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.features import MOVIELENS_FILES, item_file_folders, read_item_features
from attnsvm.rec.data.frames import Rows, _ids, as_polars, frame_rows
from attnsvm.rec.data.item_titles import NO_TITLES, TITLES_FILE, ItemTitles
from attnsvm.rec.data.tables import TableLayout, table_rows

TITLE_ROLES = ("item", "title", "category")


def title_mapping(columns: str | Mapping[str, str | int]) -> dict[str, str | int]:
    """Role → column from ``"item=sku,title=name,category=cat"`` or the same as a dict (a column
    that is all digits, or an int, is a 0-based position); every mistake is an
    ``InvalidRequest``."""
    if isinstance(columns, str):
        pairs = [tuple(p.strip() for p in part.partition("=")[::2]) for part in columns.split(",")]
        pairs = [(role, int(c) if c.isdigit() else c) for role, c in pairs]
    elif isinstance(columns, Mapping):
        pairs = list(columns.items())
    else:
        raise InvalidRequest(
            "title columns are text ('item=sku,title=name') or a dict, "
            f"not {type(columns).__name__}"
        )
    mapping: dict[str, str | int] = {}
    for role, column in pairs:
        if role not in TITLE_ROLES or column in ("", None) or isinstance(column, bool):
            raise InvalidRequest(
                f"title columns {shown(str(columns))}: expected ROLE=COLUMN with ROLE one of "
                f"{', '.join(TITLE_ROLES)} (e.g. 'item=sku,title=name,category=cat')"
            )
        if role in mapping:
            raise InvalidRequest(f"title columns name the {role} column twice")
        mapping[role] = column
    if "item" not in mapping or "title" not in mapping:
        raise InvalidRequest(
            f"title columns {shown(str(columns))} must name the item and title columns"
        )
    return mapping


def read_item_titles(
    source: str | Path | object, columns: str | Mapping[str, str | int] | None = None
) -> ItemTitles:
    """The titles in ``source`` (module docstring): a file or a DataFrame read through
    ``columns``; without ``columns``, a MovieLens movie file, ``id<TAB>title`` lines or a
    prepared table's ``TITLES_FILE``."""
    if columns is None:
        if not isinstance(source, str | Path):
            raise InvalidRequest(
                "a table of titles needs its columns: item=…,title=… (category=… optional)"
            )
        return _read_known_file(Path(source))
    mapping = title_mapping(columns)
    if isinstance(source, str | Path):
        rows, _ = table_rows(source, TableLayout(mapping))
    else:
        frame, kind = as_polars(source)
        rows = frame_rows(kind, frame, mapping, Cleaning())
    return _from_rows(rows)


def _from_rows(rows: Rows) -> ItemTitles:
    """The typed titles of a table's rows; rows without an item or a title are skipped."""
    keep = ~blank(rows.roles["item"]) & ~blank(rows.roles["title"])
    if not keep.any():
        raise DataFormatError(rows.source, "has no row with both an item and a title")
    numbers = rows.numbers[keep]
    origin = Origin.per_row(rows.source, numbers, header_hint=False, rows=not rows.lines)
    items = [str(i) for i in _ids(rows.roles["item"].filter(keep), "item id", origin).tolist()]
    names = _texts(rows.roles["title"].filter(keep))
    kinds = (
        _texts(rows.roles["category"].filter(keep))
        if "category" in rows.roles
        else [None] * len(items)
    )
    titles, categories, first = {}, {}, {}
    for index, item in enumerate(items):
        if item in titles:
            where = "line" if rows.lines else "row"
            raise origin.error(
                f"item {shown(item)} has a second title (first on {where} {first[item]})", index
            )
        titles[item], first[item] = names[index], int(numbers[index])
        if kinds[index]:
            categories[item] = kinds[index]
    return ItemTitles(titles, categories, rows.source)


def _texts(series: pl.Series) -> list[str | None]:
    """A column's values as stripped text (None where missing), whatever type held them."""
    if series.dtype != pl.String:
        series = series.cast(pl.String)
    return [None if value is None else value.strip() for value in series.to_list()]


def _read_known_file(path: Path) -> ItemTitles:
    if path.name in MOVIELENS_FILES:
        features = read_item_features(path)  # fields: title, genres
        categories = {item: texts[1] for item, texts in features.items.items() if texts[1]}
        titles = {item: texts[0] for item, texts in features.items.items()}
        return ItemTitles(titles, categories, str(path))
    if path.name == TITLES_FILE:
        return ItemTitles.load(path)
    return ItemTitles(_title_lines(path), {}, str(path))


def _title_lines(path: Path) -> dict[str, str]:
    """``id<TAB>title`` or ``id::title::…`` lines."""
    try:
        data = read_bytes(path)  # a regular file only: a named pipe would block
    except UnreadableFile as error:
        raise DataFormatError(path, error.problem) from None
    titles = {}
    # latin-1: the MovieLens 1M file is not UTF-8, and every byte decodes in latin-1
    for number, line in enumerate(data.decode("latin-1").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("::") if "::" in line else line.split("\t")
        if len(parts) < 2 or not parts[0].strip():
            raise DataFormatError(
                path,
                "expected 'id::title::genres' or 'id<TAB>title' (a table with a header: give its "
                "columns, item=…,title=…)",
                number,
            )
        titles[parts[0].strip()] = parts[1].strip()
    return titles


def read_titles(path: str | Path) -> dict[str, str]:
    """``item id → title`` from a file ``read_item_titles`` reads without a mapping."""
    return read_item_titles(path).titles


def find_titles(dataset: str, root: str | Path | None = None) -> Path | None:
    """The titles beside ``dataset``'s data (``features.item_file_folders``: the raw data under
    ``root``, a prepared copy's folder, a file's folder): a prepared table's ``TITLES_FILE``,
    else a MovieLens movie file. None if there are none."""
    for folder in item_file_folders(dataset, root):
        for name in (TITLES_FILE, *MOVIELENS_FILES):
            if (folder / name).is_file():
                return folder / name
    return None


def run_titles(dataset: str, root: str | Path | None = None) -> ItemTitles:
    """The titles found beside a run's data (``find_titles``), or none."""
    path = find_titles(dataset, root)
    return read_item_titles(path) if path is not None else NO_TITLES
