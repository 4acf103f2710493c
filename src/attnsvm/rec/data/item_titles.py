"""``ItemTitles``: the titles (and categories) of a catalogue's items, by external id as text,
and the copy a prepared table keeps in its folder (``TITLES_FILE``). ``titles`` reads them from
the user's files and DataFrames, and ``datasets`` stores them with a prepared table: this module
imports neither, since ``titles`` reads MovieLens files through ``features``, which loads
``datasets`` (one module for both would be an import circle)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from attnsvm._atomic import atomic_path
from attnsvm.errors import shown
from attnsvm.rec.data.errors import DataFormatError

#: the titles a prepared table keeps beside its ``interactions.npz``
TITLES_FILE = "item_titles.parquet"


@dataclass(frozen=True)
class ItemTitles:
    """``item id (text) → title``, and ``→ category`` for the items that have one."""

    titles: dict[str, str]
    categories: dict[str, str] = field(default_factory=dict)
    source: str = ""

    def title(self, item: object) -> str | None:
        return self.titles.get(str(item))

    def category(self, item: object) -> str | None:
        return self.categories.get(str(item))

    @classmethod
    def load(cls, path: str | Path) -> ItemTitles:
        """A ``TITLES_FILE`` as ``save`` writes it."""
        try:
            rows = pl.read_parquet(path).select("item", "title", "category").rows()
        except Exception:  # polars raises several types; all mean "not this file"
            raise DataFormatError(path, "is not a readable titles file") from None
        categories = {item: category for item, _, category in rows if category}
        return cls({item: title for item, title, _ in rows}, categories, str(path))

    def save(self, path: str | Path) -> Path:
        """As ``TITLES_FILE`` reads them: a Parquet table ``item``, ``title``, ``category``."""
        items = list(self.titles)
        table = pl.DataFrame(
            {
                "item": items,
                "title": [self.titles[item] for item in items],
                "category": [self.categories.get(item) for item in items],
            },
            schema={"item": pl.String, "title": pl.String, "category": pl.String},
        )
        with atomic_path(path) as temporary:
            table.write_parquet(temporary)
        return Path(path)


NO_TITLES = ItemTitles({})


def match_catalogue(titles: ItemTitles, item_ids: np.ndarray) -> tuple[ItemTitles, dict]:
    """The titles of the catalogue whose external ids are ``item_ids`` (index 0 is padding),
    and how many items have one; titles that name no item of it are an error, since their ids
    are then of another kind than the data's (the wrong column, another catalogue)."""
    catalogue = [str(item) for item in np.asarray(item_ids)[1:].tolist()]
    titled = [item for item in catalogue if item in titles.titles]
    if not titled:
        raise DataFormatError(
            titles.source or "titles",
            f"no title is for an item of the data: its item ids look like "
            f"{shown(next(iter(titles.titles), ''))}, the data's like "
            f"{shown(catalogue[0] if catalogue else '')} (is the item column the right one?)",
        )
    kept = ItemTitles(
        {item: titles.titles[item] for item in titled},
        {item: titles.categories[item] for item in titled if item in titles.categories},
        titles.source,
    )
    report = {
        "source": titles.source,
        "items with a title": len(titled),
        "items": len(catalogue),
        "titles of no item": len(titles.titles) - len(titled),
        "categories": len(kept.categories),
    }
    return kept, report
