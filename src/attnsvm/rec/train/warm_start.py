"""``train.init_from = RUN_DIR``: start a run from another run's weights (pre-train → fine-tune).

Strict (``train.init_strict = true``, the default): the source run's weights must fit the new
model exactly — the same parameter names and shapes, the same catalogue — and every parameter
is loaded. Partial (``false``): every parameter whose name and shape match is loaded, the
source's other parameters are skipped and the new model's others keep their fresh
initialisation; the lists are printed and written to ``init_from.json`` in the new run.

Item tables follow the items, not the row numbers. When the two runs' catalogues differ (another
dataset, another filter), each tensor of the model's item table (``model.item_tables()``: its
first dimension is the catalogue plus padding, plus any special rows such as BERT4Rec's mask
token) is remapped by external id: row ``i`` of the new model takes the source row of the same
external item, and items the source never saw keep their fresh rows. Padding and special rows
carry over as they are. Strict mode refuses differing catalogues.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from attnsvm.errors import ExpectedFailure
from attnsvm.rec.models import SequentialRecommender
from attnsvm.rec.train.checkpoint import (
    WEIGHTS,
    RunDirError,
    finished_run,
    read_id_maps,
    read_model_info,
    read_weights,
)


class InitError(ExpectedFailure, ValueError):
    """The source run cannot initialise this model as asked."""


@dataclass
class InitReport:
    source: str
    strict: bool
    loaded: list[str] = field(default_factory=list)
    remapped: list[str] = field(default_factory=list)  # item tables, row by external id
    skipped: list[str] = field(default_factory=list)  # source parameters not used
    initialised: list[str] = field(default_factory=list)  # new parameters left as initialised
    items_matched: int = 0  # new catalogue items found in the source catalogue

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        lines = [f"initialised from {self.source} ({'strict' if self.strict else 'partial'})"]
        for name in ("loaded", "remapped", "skipped", "initialised"):
            keys = getattr(self, name)
            if keys:
                lines.append(f"  {name} ({len(keys)}): {', '.join(keys)}")
        if self.remapped:
            lines.append(f"  items found in the source catalogue: {self.items_matched}")
        return "\n".join(lines)


def _source(run_dir: str | Path) -> tuple[Path, dict, np.ndarray]:
    try:
        path = finished_run(run_dir)
    except RunDirError as error:
        raise InitError(f"train.init_from: {error}") from None
    try:
        info = read_model_info(path)
        if info.get("baseline"):
            raise InitError(f"train.init_from: {path} is a baseline run; it has no weights")
        items = np.array(read_id_maps(path, info["num_items"])["items"]).astype(str)
    except RunDirError as error:
        raise InitError(f"train.init_from: {error}") from None
    return path, info, items


def _row_map(new_items: np.ndarray, old_items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(new rows, old rows)`` of the real items both catalogues hold (index 0 is padding)."""
    index = {item: row for row, item in enumerate(old_items.tolist()) if row > 0}
    pairs = [(row, index[item]) for row, item in enumerate(new_items.tolist()) if item in index]
    pairs = [(new, old) for new, old in pairs if new > 0]
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def _remap(
    fresh: torch.Tensor, old: torch.Tensor, old_items: int, new_items: int, rows
) -> torch.Tensor:
    out = fresh.clone()
    out[0] = old[0]
    out[new_items + 1 :] = old[old_items + 1 :]  # special rows after the catalogue
    new_rows, old_rows = rows
    out[torch.from_numpy(new_rows)] = old[torch.from_numpy(old_rows)].to(out.dtype)
    return out


def init_from(
    model: SequentialRecommender, run_dir: str | Path, item_ids: np.ndarray, strict: bool = True
) -> InitReport:
    """Load ``run_dir``'s weights into ``model`` (whose catalogue's external ids are
    ``item_ids``) as the module docstring says, and report what was loaded."""
    path, info, old_items = _source(run_dir)
    new_items = np.asarray(item_ids).astype(str)
    same_catalogue = old_items.shape == new_items.shape and bool(np.all(old_items == new_items))
    old_count, new_count = info["num_items"], model.num_items
    source = read_weights(path / WEIGHTS)
    target = model.state_dict()
    report = InitReport(str(path), strict)
    rows = None if same_catalogue else _row_map(new_items, old_items)
    state = {}
    item_tables = set(model.item_tables())
    for name, fresh in target.items():
        old = source.get(name)
        item_table = (
            name in item_tables
            and old is not None
            and old.shape[0] - old_count == fresh.shape[0] - new_count >= 1
            and old.shape[1:] == fresh.shape[1:]
        )
        if item_table and rows is not None:
            state[name] = _remap(fresh, old, old_count, new_count, rows)
            report.remapped.append(name)
        elif old is not None and old.shape == fresh.shape:
            state[name] = old
            report.loaded.append(name)
        else:
            report.initialised.append(name)
    report.skipped = sorted(set(source) - set(target))
    if rows is not None:
        report.items_matched = len(rows[0])
    if strict and (report.initialised or report.skipped or report.remapped):
        problems = []
        if not same_catalogue:
            problems.append(f"the catalogues differ ({old_count} items there, {new_count} here)")
        if report.initialised:
            problems.append(f"no matching source weights for {', '.join(report.initialised)}")
        if report.skipped:
            problems.append(f"source weights this model lacks: {', '.join(report.skipped)}")
        raise InitError(
            f"train.init_from {path}: cannot load strictly: {'; '.join(problems)} "
            "(set train.init_strict = false to load what fits)"
        )
    model.load_state_dict({**target, **state}, strict=True)
    return report
