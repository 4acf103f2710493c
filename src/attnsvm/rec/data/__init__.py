"""Interaction data: raw file → ``readers`` → ``Interactions`` → ``splits`` → ``batches``.

``catalog`` is the registry of named datasets, ``sources`` finds and verifies their raw files,
``datasets`` downloads, prepares, caches and loads them (``_parse`` is the readers' toolkit,
``titles`` reads item titles), ``samplers`` draws negatives, ``synthetic`` makes planted-trigger
sequences with their ground truth, and ``sequences`` holds the CSR ``Sequences`` / ``EvalTask``
types the other stages exchange.
"""
