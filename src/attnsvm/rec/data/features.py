"""Item features: MovieLens titles and genres, S3-Rec item attributes, aligned to internal ids.

Readers (one per file, chosen by its name), each giving ``external item id → field texts``:

- ``movies.dat`` (ML-1M, ``id::title::genres``, genres ``|``-separated) and ``u.item`` (ML-100K,
  ``id|title|release|video release|IMDb URL|`` then 19 genre flags): fields ``title`` and
  ``genres``. GroupLens released both in ISO-8859-1, so a file that is not valid UTF-8 is read
  as ISO-8859-1 (every byte is a character there: no title can fail to decode).
- ``movies.csv`` (ml-latest, ``movieId,title,genres`` with a header, titles quoted where they
  hold commas): fields ``title`` and ``genres``; UTF-8 by its README, so a title that is not
  valid UTF-8 is an error naming the item.
- ``*_item2attributes.json`` (S3-Rec: ``{"item id": [attribute ids]}``): field ``attributes``.

Malformed lines, duplicate item ids, malformed JSON and bad encodings raise ``DataFormatError``
naming the file, the line where there is one, and the item. ``align_features`` puts the texts in
a dataset's internal id order and names the items the file lacks; ``hashed_tokens`` turns them
into token ids for an item tower: lower-cased words, each hashed with its field's name into
``1 … num_buckets − 1`` (0 pads). Hashing needs no vocabulary, so two catalogues (ML-1M and
ML-100K) give the same word the same id, which is what lets a model move between them.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnsvm.errors import shown
from attnsvm.rec.data._parse import file_bytes
from attnsvm.rec.data.catalog import DATASETS
from attnsvm.rec.data.errors import DataFormatError

MOVIELENS_FILES = ("movies.dat", "u.item", "movies.csv")
ATTRIBUTES_SUFFIX = "_item2attributes.json"
# ML-100K's u.genre, in the order of u.item's 19 flags
# fmt: off
ML100K_GENRES = (
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime",
    "Documentary", "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance",
    "Sci-Fi", "Thriller", "War", "Western",
)
# fmt: on
U_ITEM_LAYOUT = f"'id|title|date|video date|URL|' and {len(ML100K_GENRES)} 0/1 genre flags"


@dataclass(frozen=True)
class FeatureFile:
    """What a feature file holds: ``items[external id]`` = one text per field."""

    path: str
    fields: tuple[str, ...]
    items: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class ItemFeatures:
    """Field texts of every item of a catalogue; ``texts[i]`` is internal item i's (0: padding)."""

    source: str
    fields: tuple[str, ...]
    texts: list[tuple[str, ...]]


class _Items:
    """Collects ``id → texts`` and refuses an id seen before, naming both lines."""

    def __init__(self, path: Path) -> None:
        self.path, self.items, self.lines = path, {}, {}

    def add(self, item: str, texts: tuple[str, ...], line: int | None) -> None:
        if not item:
            raise DataFormatError(self.path, "has an empty item id", line)
        if item in self.items:
            first = self.lines[item]
            where = f" (first on line {first})" if first is not None else ""
            raise DataFormatError(self.path, f"item {shown(item)} appears twice{where}", line)
        self.items[item], self.lines[item] = texts, line


def _lines(text: str):
    """``(line number, line)`` of the non-blank lines, without line ends."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield number, line


def _grouplens_text(path: Path) -> str:
    """UTF-8 (a BOM dropped) where the bytes are, else ISO-8859-1, GroupLens' own encoding."""
    data = file_bytes(path, None)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("iso-8859-1")


def _movies_dat(path: Path) -> FeatureFile:
    items = _Items(path)
    for number, line in _lines(_grouplens_text(path)):
        parts = line.split("::")
        if len(parts) != 3:
            raise DataFormatError(path, "expected 'id::title::genres'", number)
        items.add(parts[0].strip(), (parts[1].strip(), parts[2].replace("|", " | ")), number)
    return FeatureFile(str(path), ("title", "genres"), items.items)


def _u_item(path: Path) -> FeatureFile:
    items = _Items(path)
    for number, line in _lines(_grouplens_text(path)):
        parts = line.split("|")
        flags = parts[5:]
        if len(parts) != 5 + len(ML100K_GENRES) or any(f not in ("0", "1") for f in flags):
            raise DataFormatError(path, f"expected {U_ITEM_LAYOUT}", number)
        genres = " | ".join(g for g, flag in zip(ML100K_GENRES, flags, strict=True) if flag == "1")
        items.add(parts[0].strip(), (parts[1].strip(), genres), number)
    return FeatureFile(str(path), ("title", "genres"), items.items)


def _movies_csv(path: Path) -> FeatureFile:
    items = _Items(path)
    raw_lines = file_bytes(path, None).removeprefix(b"\xef\xbb\xbf").split(b"\n")
    for number, raw in enumerate(raw_lines, 1):
        try:
            line = raw.rstrip(b"\r").decode("utf-8")
        except UnicodeDecodeError as error:
            item = raw.split(b",", 1)[0].decode("ascii", "replace")
            raise DataFormatError(
                path,
                f"item {shown(item)}: the title is not valid UTF-8 "
                f"(byte 0x{raw[error.start]:02x} at column {error.start + 1})",
                number,
            ) from None
        if not line.strip():
            continue
        row = next(csv.reader([line]))
        if number == 1:
            if row != ["movieId", "title", "genres"]:
                raise DataFormatError(path, "expected the header 'movieId,title,genres'", 1)
            continue
        if len(row) != 3:
            raise DataFormatError(path, "expected 'movieId,title,genres'", number)
        genres = "" if row[2] == "(no genres listed)" else row[2].replace("|", " | ")
        items.add(row[0].strip(), (row[1].strip(), genres), number)
    return FeatureFile(str(path), ("title", "genres"), items.items)


def _item2attributes(path: Path) -> FeatureFile:
    data = file_bytes(path, None)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DataFormatError(path, "is not valid UTF-8", line) from None
    try:
        # objects as their (key, value) pairs: json's dict would keep only the last of two
        # equal keys, and a repeated item id is an error to report, not to resolve silently
        top = json.loads(text, object_pairs_hook=_Pairs)
    except json.JSONDecodeError as error:
        raise DataFormatError(
            path, f"is not valid JSON ({error.msg}, column {error.colno})", error.lineno
        ) from None
    except RecursionError:
        raise DataFormatError(path, "is not valid JSON here (nested too deeply)") from None
    if not isinstance(top, _Pairs):
        raise DataFormatError(path, "expected a JSON object of item id → list of attribute ids")
    items = _Items(path)
    for key, value in top:
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise DataFormatError(path, f"item {shown(key)}: expected a list of attribute ids")
        items.add(key.strip(), (" ".join(map(str, value)),), None)
    return FeatureFile(str(path), ("attributes",), items.items)


class _Pairs(list):
    """A JSON object as the list of its (key, value) pairs, in file order."""


def read_item_features(path: str | Path) -> FeatureFile:
    """The features in ``path``, read by the reader its name says (module docstring)."""
    path = Path(path)
    readers = {"movies.dat": _movies_dat, "u.item": _u_item, "movies.csv": _movies_csv}
    if path.name in readers:
        return readers[path.name](path)
    if path.name.endswith(ATTRIBUTES_SUFFIX):
        return _item2attributes(path)
    known = ", ".join([*MOVIELENS_FILES, f"*{ATTRIBUTES_SUFFIX}"])
    raise DataFormatError(path, f"is not an item feature file this reads ({known})")


def item_file_folders(dataset: str, root: str | Path | None = None) -> list[Path]:
    """Where files about ``dataset``'s items lie, in the order to look: for a registered
    dataset its folders under ``root`` and ``root``, then its prepared copy's folder; for a file
    (a prepared ``interactions.npz`` too) its folder; for a table prepared under a name of its
    own, that table's folder in the cache (never the current directory, which ``Path(name)``
    would name). The order of ``load_dataset``: an existing path before a prepared name."""
    from attnsvm.rec.data.datasets import prepared_path  # the data layer's loader, imported late

    if dataset in DATASETS:
        folders = []
        if root is not None:
            folders += [Path(root) / folder for folder in DATASETS[dataset].folders]
            folders.append(Path(root))
        return [*folders, prepared_path(dataset).parent]
    if Path(dataset).exists():
        return [Path(dataset).parent]
    prepared = prepared_path(dataset)
    return [prepared.parent] if prepared.exists() else []


def find_feature_file(dataset: str, root: str | Path | None = None) -> Path | None:
    """The feature file beside ``dataset``'s raw data (``item_file_folders``): MovieLens files
    first, then an S3-Rec attributes file. None if there is none."""
    for folder in item_file_folders(dataset, root):
        for name in MOVIELENS_FILES:
            if (folder / name).is_file():
                return folder / name
        attributes = sorted(folder.glob(f"*{ATTRIBUTES_SUFFIX}")) if folder.is_dir() else []
        if attributes:
            return attributes[0]
    return None


def align_features(features: FeatureFile, item_ids: np.ndarray) -> ItemFeatures:
    """``features`` in the internal id order of a catalogue whose external ids are ``item_ids``
    (index 0 is padding); every item must have a row in the file."""
    empty = ("",) * len(features.fields)
    texts, missing = [empty], []
    for external in map(str, np.asarray(item_ids)[1:].tolist()):
        row = features.items.get(external)
        if row is None:
            missing.append(external)
        texts.append(row if row is not None else empty)
    if missing:
        some = ", ".join(shown(item) for item in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise DataFormatError(
            features.path,
            f"has no features for item {some}{more} ({len(missing)} of the catalogue's "
            f"{len(item_ids) - 1} items)",
        )
    return ItemFeatures(features.path, features.fields, texts)


def load_item_features(
    dataset: str, root: str | Path | None = None, file: str | Path | None = None
) -> ItemFeatures:
    """The features of ``dataset``'s catalogue (read as ``load_dataset(dataset, root=root)``
    reads it), from ``file`` or the feature file found beside the data."""
    from attnsvm.rec.data.datasets import load_dataset  # reads the whole table: only here

    path = Path(file) if file is not None else find_feature_file(dataset, root)
    if path is None:
        known = ", ".join([*MOVIELENS_FILES, f"*{ATTRIBUTES_SUFFIX}"])
        where = f"under {root}" if root is not None else "in its prepared copy's folder"
        raise DataFormatError(
            dataset, f"has no item feature file ({known}) beside its data {where}"
        )
    features = read_item_features(path)
    return align_features(features, load_dataset(dataset, root=root).item_ids)


def words(text: str) -> list[str]:
    """Lower-cased words (runs of letters, digits and underscores) of ``text``."""
    return re.findall(r"\w+", text.lower())


def token_id(field: str, word: str, num_buckets: int) -> int:
    """``word`` of ``field`` hashed into ``1 … num_buckets − 1`` (BLAKE2b: the same everywhere)."""
    digest = hashlib.blake2b(f"{field}\x1f{word}".encode(), digest_size=8).digest()
    return 1 + int.from_bytes(digest, "little") % (num_buckets - 1)


def hashed_tokens(features: ItemFeatures, num_buckets: int, tokens_per_field: int) -> np.ndarray:
    """``(num_items + 1, F, T)`` int64 token ids: the first ``T = tokens_per_field`` words of
    each item's fields, hashed (``token_id``); 0 pads (and is padding's every token)."""
    if num_buckets < 2 or tokens_per_field < 1:
        raise ValueError("hashed_tokens needs num_buckets ≥ 2 and tokens_per_field ≥ 1")
    out = np.zeros((len(features.texts), len(features.fields), tokens_per_field), np.int64)
    known: dict[tuple[str, str], int] = {}
    for item, texts in enumerate(features.texts):
        for index, (field, text) in enumerate(zip(features.fields, texts, strict=True)):
            for position, word in enumerate(words(text)[:tokens_per_field]):
                key = (field, word)
                if key not in known:
                    known[key] = token_id(field, word, num_buckets)
                out[item, index, position] = known[key]
    return out
