"""Recommend from an exported ONNX file alone: onnxruntime and numpy, no torch, no attnsvm model.

``attnsvm export RUN --format onnx`` writes a file whose metadata (``attnsvm.recommend``) holds
the item id map, the user map (for models that read ``users``), the padding rule and the
ranking rule (``attnsvm.rec.train.export``). ``ExportedRecommender`` reads them and does what
``attnsvm recommend`` does around the network::

    from attnsvm.rec.train.export_reader import ExportedRecommender

    model = ExportedRecommender("runs/sasrec-plus/export/model.onnx")
    model.recommend(["1193", "661", "914"], k=10)  # original item ids, oldest first
    # → the top 10 original item ids, seen items excluded, ties to the lower internal id

For a user of the training data, pass that user's whole history (and ``user=`` for a model
with a user table): the list equals ``attnsvm recommend RUN --user U``. This module imports
only numpy and onnxruntime (and the standard library); copy it beside the file to use it
without attnsvm installed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

RECIPE_KEY = "attnsvm.recommend"
_PADDED = ("timestamps", "ratings")  # (B, max_len) inputs besides the items, padded as they are
_DTYPES = {"tensor(double)": np.float64, "tensor(float)": np.float32, "tensor(int64)": np.int64}


class ExportedRecommender:
    """Top-k next items (original ids) from an exported ONNX file, as ``attnsvm recommend``."""

    def __init__(self, path: str | Path, threads: int | None = None) -> None:
        try:
            import onnxruntime
        except ImportError as missing:  # a one-line answer, also where attnsvm is not installed
            raise ImportError(
                "reading an exported model needs onnxruntime: pip install onnxruntime "
                "(or attnsvm[export])"
            ) from missing

        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        metadata = self.session.get_modelmeta().custom_metadata_map
        if RECIPE_KEY not in metadata:
            raise ValueError(f"{path}: no {RECIPE_KEY} metadata (exported by an older attnsvm?)")
        recipe = json.loads(metadata[RECIPE_KEY])
        self.inputs: list[str] = recipe["inputs"]
        self.items: list[str | None] = recipe["items"]  # internal id → original id; 0: padding
        self.max_len: int = recipe["padding"]["length"]
        self.padding_id: int = recipe["padding"]["id"]
        self._item_index = {item: i for i, item in enumerate(self.items) if i > 0}
        users = recipe.get("users")
        self._user_index = None if users is None else {u: i for i, u in enumerate(users)}
        self._dtypes = {i.name: _DTYPES.get(i.type) for i in self.session.get_inputs()}

    @property
    def num_items(self) -> int:
        return len(self.items) - 1

    def internal_items(self, items: Sequence) -> np.ndarray:
        """Internal ids of original item ids (compared as text); a ValueError names unknown ones."""
        unknown = [item for item in items if str(item) not in self._item_index]
        if unknown:
            raise ValueError(f"unknown item id(s) {', '.join(map(str, unknown[:5]))}")
        return np.array([self._item_index[str(item)] for item in items], dtype=np.int64)

    def scores(
        self, history: Sequence, user: object = None, events: dict | None = None
    ) -> np.ndarray:
        """``(num_items + 1,)`` float32 scores after ``history`` (original ids, oldest first),
        −∞ at the padding id and at every item of the history. ``user``: the original user id,
        for a model that reads ``users`` (anyone else, or None, gets the unknown-user vector);
        ``events``: ``{"timestamps": […]}`` or ``{"ratings": […]}`` aligned with ``history``,
        for a model that reads them."""
        internal = self.internal_items(history)
        if internal.size == 0:
            raise ValueError("the history is empty")
        feed = {"item_seq": self._left_padded(internal, np.int64, self.padding_id)}
        for name in self.inputs[1:-1]:
            if name == "users":
                row = -1 if self._user_index is None else self._user_index.get(str(user), -1)
                feed[name] = np.array([row], dtype=np.int64)
            elif name in _PADDED and events is not None and name in events:
                values = np.asarray(events[name])
                if values.shape != internal.shape:
                    raise ValueError(f"{name}: one value per history item, got {values.shape}")
                feed[name] = self._left_padded(values, self._dtypes[name], 0)
            else:
                raise ValueError(f"this model reads {name!r}: give events={{{name!r}: […]}}")
        seen = np.zeros((1, self.num_items + 1), dtype=bool)
        seen[0, internal] = True
        feed[self.inputs[-1]] = seen
        scores = self.session.run(None, feed)[0][0]
        scores[self.padding_id] = -np.inf  # the network's part too; never an item
        return scores

    def recommend(
        self, history: Sequence, k: int = 10, user: object = None, events: dict | None = None
    ) -> list[str]:
        """The top-``k`` original item ids after ``history`` (see ``scores``): scores
        descending, ties to the lower internal id, seen items never; fewer than ``k`` when
        fewer items are rankable."""
        if not 1 <= k <= self.num_items:
            raise ValueError(f"k must lie in 1..{self.num_items}, got {k}")
        scores = self.scores(history, user, events)
        order = np.argsort(-scores, kind="stable")[:k]  # stable: equal scores, lower id first
        return [self.items[i] for i in order if scores[i] != -np.inf]

    def _left_padded(self, values: np.ndarray, dtype, fill) -> np.ndarray:
        """The last ``max_len`` values as a (1, max_len) row, left-padded with ``fill``."""
        tail = values[-self.max_len :]
        window = np.full((1, self.max_len), fill, dtype=dtype)
        window[0, self.max_len - tail.size :] = tail
        return window
