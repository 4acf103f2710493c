"""Item titles for showing recommendations to people: MovieLens ``movies.dat`` or ``id<TAB>title``.

Titles are keyed by the item id as it appears in the data file (the external id, as text), so
they pair with a run's ``id_maps.json`` whatever internal ids the run gave the items.
"""

from __future__ import annotations

from pathlib import Path

from attnsvm.rec.data.catalog import DATASETS
from attnsvm.rec.data.datasets import prepared_path
from attnsvm.rec.data.errors import DataFormatError


def read_titles(path: str | Path) -> dict[str, str]:
    """``item id → title`` from ``movies.dat`` (``id::title::genres``) or ``id<TAB>title``."""
    path = Path(path)
    titles = {}
    # latin-1: the MovieLens 1M file is not UTF-8, and every byte decodes in latin-1
    with path.open(encoding="latin-1") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("::") if "::" in line else line.split("\t")
            if len(parts) < 2 or not parts[0].strip():
                raise DataFormatError(
                    path, "expected 'id::title::genres' or 'id<TAB>title'", number
                )
            titles[parts[0].strip()] = parts[1].strip()
    return titles


def find_titles(dataset: str, root: str | Path | None = None) -> Path | None:
    """``movies.dat`` beside ``dataset``'s raw data (under ``root``, where the run read it from)
    or its prepared cache; for a dataset given as a file path, beside that file. None if absent."""
    candidates = []
    if dataset in DATASETS:
        if root is not None:
            candidates += [Path(root) / f / "movies.dat" for f in DATASETS[dataset].folders]
            candidates.append(Path(root) / "movies.dat")
        candidates.append(prepared_path(dataset).parent / "movies.dat")
    else:
        candidates.append(Path(dataset).parent / "movies.dat")
    return next((c for c in candidates if c.is_file()), None)
