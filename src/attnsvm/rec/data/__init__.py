"""Interaction data: raw file → ``readers`` → ``Interactions`` → ``splits`` → ``batches``.

``datasets`` is the registry of named datasets (download, prepare, cache), ``samplers`` draws
negatives, ``synthetic`` makes planted-trigger sequences with their ground truth, and
``sequences`` holds the CSR ``Sequences`` / ``EvalTask`` types the other stages exchange.
"""
