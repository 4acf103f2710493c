"""Item titles for showing recommendations to people: MovieLens ``movies.dat``, ``u.item`` and
``movies.csv`` (read by ``attnsvm.rec.data.features``, which owns those formats) or
``id<TAB>title``.

Titles are keyed by the item id as it appears in the data file (the external id, as text), so
they pair with a run's ``id_maps.json`` whatever internal ids the run gave the items.
"""

from __future__ import annotations

from pathlib import Path

from attnsvm._files import read_bytes
from attnsvm.errors import UnreadableFile
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.features import MOVIELENS_FILES, find_feature_file, read_item_features


def read_titles(path: str | Path) -> dict[str, str]:
    """``item id → title`` from a MovieLens movie file or ``id<TAB>title`` lines."""
    path = Path(path)
    if path.name in MOVIELENS_FILES:
        return {item: texts[0] for item, texts in read_item_features(path).items.items()}
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
            raise DataFormatError(path, "expected 'id::title::genres' or 'id<TAB>title'", number)
        titles[parts[0].strip()] = parts[1].strip()
    return titles


def find_titles(dataset: str, root: str | Path | None = None) -> Path | None:
    """The MovieLens movie file beside ``dataset``'s raw data (under ``root``, where the run read
    it from) or its prepared cache; for a dataset given as a file path, beside that file. None if
    absent (``features.find_feature_file`` looks)."""
    path = find_feature_file(dataset, root)
    return path if path is not None and path.name in MOVIELENS_FILES else None
