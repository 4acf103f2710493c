"""Interaction data: raw file or DataFrame → ``readers`` / ``frames`` → ``Interactions`` →
``splits`` → ``batches``.

``catalog`` is the registry of named datasets, ``sources`` finds and verifies their raw files,
``datasets`` downloads, prepares, caches and loads them (``_parse`` and ``_tokens`` are the
readers' toolkit, ``tables`` reads a file of one's own with a column mapping, ``frames`` types
every such table, a DataFrame's too, ``cleaning`` cleans one as it is prepared, ``titles``
reads item titles and categories), ``samplers`` draws negatives, ``synthetic`` makes
planted-trigger sequences with their ground truth, and ``sequences`` holds the CSR
``Sequences`` / ``EvalTask`` types the other stages exchange.

The Python API for one's own data is here: ``read_frame`` (a DataFrame → ``Interactions``),
``prepare_frame`` (a DataFrame stored as a named dataset, as ``attnsvm data prepare`` stores a
file), ``Cleaning`` (what to drop as it is prepared), ``read_item_titles`` (item titles and
categories from a file or a DataFrame, for ``prepare_frame(titles=…)``) and ``load_dataset``.
"""

import importlib

_API = {
    "Cleaning": "cleaning",
    "load_dataset": "datasets",
    "prepare_frame": "datasets",
    "read_frame": "frames",
    "read_item_titles": "titles",
}
__all__ = list(_API)


def __getattr__(name: str) -> object:
    # imported on first use: a module that needs one stage (the splits, the batches) does not
    # load every reader with it
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
