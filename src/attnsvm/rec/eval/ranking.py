"""Full-catalogue ranking: streaming top-k over batches of users, with the seen-item filter.

A model is seen only through a score function ``score_fn(rows) -> (len(rows), num_items + 1)``
tensor; column 0 is padding and is never recommended. The ranker owns the returned tensor and
modifies it in place. Only one batch of scores exists at a time, so memory is
batch × items, never users × items.

Rules (each is tested against a brute-force reference):

* **Exclusion.** With ``exclude_seen`` the items of ``task.exclude.row(r)`` get score -inf,
  except the user's own targets: a target is never excluded for its own user, so a repeated
  item stays rankable.
* **Ties.** Among equal scores the lower item id ranks first, exactly, also at the top-k
  boundary (``torch.topk`` alone does not guarantee which tied item it keeps).
* **Short lists.** Items scored -inf are never recommended; where fewer than k items remain
  rankable, the tail of the row is 0.
* **NaN.** A NaN score among the rankable items stops the evaluation with a ValueError.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterator
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from attnsvm._atomic import atomic_path, write_bytes
from attnsvm._files import open_regular, read_text
from attnsvm.errors import UnreadableFile, cut
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.eval.metrics import check_ks, metrics_from_topk

ScoreFn = Callable[[np.ndarray], torch.Tensor]


def check_item_ids(task: EvalTask, num_items: int) -> None:
    """A ValueError naming the field if any target or excluded item id is outside 1..num_items."""
    for name in ("targets", "exclude"):
        items = getattr(task, name).items
        if items.size and items.max() > num_items:
            raise ValueError(
                f"EvalTask.{name} holds item id {items.max()}, but the catalogue is 1..{num_items}"
            )


def batch_scores(score_fn: ScoreFn, rows: np.ndarray, num_items: int) -> torch.Tensor:
    """Call the model on one batch and check the shape of what came back; ints become float64."""
    scores = score_fn(rows)
    if not isinstance(scores, torch.Tensor) or scores.shape != (rows.size, num_items + 1):
        shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"score_fn returned {shape}; expected ({rows.size}, {num_items + 1})")
    return scores if scores.is_floating_point() else scores.to(torch.float64)


def check_no_nan(best: torch.Tensor, rows: np.ndarray) -> None:
    """``best`` = each row's top score; torch ranks NaN above everything, so NaN shows there."""
    bad = torch.isnan(best).cpu().numpy()
    if bad.any():
        shown = ", ".join(map(str, rows[bad][:5].tolist()))
        raise ValueError(f"score_fn returned NaN scores for task rows {shown}")


def csr_block(seqs: Sequences, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch-local row indices and items of rows start..stop-1, for one vectorised scatter."""
    lo, hi = seqs.offsets[start], seqs.offsets[stop]
    local_rows = np.repeat(
        np.arange(stop - start, dtype=np.int64), np.diff(seqs.offsets[start : stop + 1])
    )
    return local_rows, seqs.items[lo:hi]


def mask_batch(
    scores: torch.Tensor, task: EvalTask, start: int, stop: int, exclude_seen: bool
) -> None:
    """Set padding and (optionally) excluded items to -inf in place, keeping the targets."""
    scores[:, 0] = -torch.inf
    if not exclude_seen:
        return
    device = scores.device
    t_rows, t_items = (torch.from_numpy(a).to(device) for a in csr_block(task.targets, start, stop))
    e_rows, e_items = (torch.from_numpy(a).to(device) for a in csr_block(task.exclude, start, stop))
    target_scores = scores[t_rows, t_items]
    scores[e_rows, e_items] = -torch.inf
    scores[t_rows, t_items] = target_scores


def topk_lower_id_first(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k (scores, item ids) per row ordered by (score desc, id asc); -inf entries get id 0."""
    values, ids = torch.topk(scores, k + 1, dim=1)
    # topk keeps an arbitrary subset of the items tied at the k-th score. A tie crosses the
    # boundary exactly when the (k+1)-th score equals the k-th; those rows are re-ranked by a
    # full stable sort (exact, and rare for real models).
    boundary = values[:, k - 1]
    ambiguous = torch.nonzero((values[:, k] == boundary) & (boundary > -torch.inf))[:, 0]
    values, ids = values[:, :k], ids[:, :k]
    if ambiguous.numel():
        order = torch.sort(scores[ambiguous], dim=1, descending=True, stable=True).indices
        ids[ambiguous] = order[:, :k]
        values[ambiguous] = torch.gather(scores[ambiguous], 1, ids[ambiguous])
    # order within the kept set: by id, then stably by score, so ties read lower id first
    ids, by_id = torch.sort(ids, dim=1)
    values = torch.gather(values, 1, by_id)
    values, by_score = torch.sort(values, dim=1, descending=True, stable=True)
    ids = torch.gather(ids, 1, by_score)
    return values, ids.masked_fill_(values == -torch.inf, 0)


def rank_topk(
    score_fn: ScoreFn,
    task: EvalTask,
    num_items: int,
    k: int = 100,
    *,
    batch_size: int = 1024,
    exclude_seen: bool = True,
) -> np.ndarray:
    """``(len(task), k)`` int64 item ids, best first, ranking the whole catalogue 1..num_items.

    Rows are scored in batches of similar history length (longest first), so a score function
    that trims the padding its batch does not need (:func:`trim_padding`) computes little of it;
    each row's result does not depend on its batch.
    """
    if not 1 <= k <= num_items:
        raise ValueError(f"k={k} must be in 1..num_items={num_items}")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    check_item_ids(task, num_items)
    out = np.zeros((len(task), k), dtype=np.int64)
    for rows, ids, _ in ranked_batches(
        score_fn, task, num_items, k, batch_size=batch_size, exclude_seen=exclude_seen
    ):
        out[rows] = ids.cpu().numpy()
    return out


def ranked_batches(
    score_fn: ScoreFn,
    task: EvalTask,
    num_items: int,
    k: int,
    *,
    batch_size: int = 1024,
    exclude_seen: bool = True,
) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
    """``(rows, item ids (B, k), scores (B, k))`` per batch of task rows, longest histories
    first (ids 0 where fewer than k items are rankable); the caller has checked ``k`` and
    ``batch_size``. ``rank_topk`` keeps the ids; bulk recommendation keeps the scores too."""
    order = np.argsort(-task.history.lengths, kind="stable")
    ordered = EvalTask(
        task.users[order],
        task.history.select(order),
        task.targets.select(order),
        task.exclude.select(order),
    )
    with torch.inference_mode():
        for start in range(0, len(task), batch_size):
            stop = min(start + batch_size, len(task))
            rows = order[start:stop]
            scores = batch_scores(score_fn, rows, num_items)
            mask_batch(scores, ordered, start, stop, exclude_seen)
            values, ids = topk_lower_id_first(scores, k)
            check_no_nan(values[:, 0], rows)
            yield rows, ids, values


def trim_padding(windows: np.ndarray) -> np.ndarray:
    """Left-padded windows without the leading columns that are padding in every row (one
    column is kept): for models whose output at real positions does not depend on them."""
    real = np.flatnonzero((windows != 0).any(axis=0))
    first = int(real[0]) if real.size else windows.shape[1] - 1
    return windows[:, first:]


def protocol_label(exclude_seen: bool, task: EvalTask | None = None) -> str:
    """The ranking protocol in words; a task whose exclusion lists are all empty (the session
    protocols: repeats are common) excludes nothing, whatever ``exclude_seen`` says."""
    if task is not None and task.exclude.items.size == 0:
        return "full ranking, nothing excluded"
    return f"full ranking, seen items {'excluded' if exclude_seen else 'kept'}"


@dataclass(frozen=True, eq=False)  # arrays inside: no element-wise __eq__
class EvalResult:
    """Mean metrics, per-user metric arrays (row r = user ``users[r]``) and the protocol used."""

    metrics: dict[str, float]
    per_user: dict[str, np.ndarray] = field(repr=False)
    protocol: str
    users: np.ndarray = field(repr=False)

    def to_json(self) -> str:
        """Metrics and protocol as JSON; the per-user arrays travel separately (see ``save``)."""
        return json.dumps(
            {"protocol": self.protocol, "num_users": int(self.users.size), "metrics": self.metrics},
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str, per_user: dict[str, np.ndarray], users: np.ndarray) -> EvalResult:
        data = json.loads(text)
        if data["num_users"] != len(users):
            raise ValueError(f"JSON says {data['num_users']} users; the arrays hold {len(users)}")
        return cls(
            {k: float(v) for k, v in data["metrics"].items()}, per_user, data["protocol"], users
        )

    def save(self, path: str | Path) -> None:
        """``path`` (JSON) plus ``path`` with suffix ``.npz`` (per-user arrays), each atomically.

        The arrays are written first, so a JSON file always has its arrays next to it.
        """
        path = Path(path)
        text = self.to_json().encode()
        arrays = {"users": self.users, **{f"metric:{k}": v for k, v in self.per_user.items()}}
        with atomic_path(path.with_suffix(".npz")) as temporary:
            np.savez(temporary, **arrays)
        write_bytes(path, text)

    @classmethod
    def load(cls, path: str | Path) -> EvalResult:
        """The result ``save`` wrote; a missing, damaged or mismatched pair of files is an
        ``UnreadableFile`` naming the file."""
        path = Path(path)
        arrays_path = path.with_suffix(".npz")
        with open_regular(arrays_path) as file:
            try:
                with np.load(file, allow_pickle=False) as arrays:
                    per_user = {
                        k[len("metric:") :]: arrays[k] for k in arrays.files if k != "users"
                    }
                    users = arrays["users"]
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
                raise UnreadableFile(arrays_path, f"damaged ({cut(str(error))})") from None
        if users.ndim != 1 or any(a.shape != users.shape for a in per_user.values()):
            raise UnreadableFile(arrays_path, "damaged (per-user arrays of different lengths)")
        text = read_text(path)
        try:
            return cls.from_json(text, per_user, users)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise UnreadableFile(
                path, f"not a saved evaluation result ({cut(repr(error))})"
            ) from None


def evaluate(
    score_fn: ScoreFn,
    task: EvalTask,
    num_items: int,
    ks: SequenceOf[int] = (1, 5, 10, 20),
    *,
    batch_size: int = 1024,
    exclude_seen: bool = True,
    item_popularity: np.ndarray | None = None,
) -> EvalResult:
    """Full-ranking HR/NDCG/MRR/Recall@K, coverage@K and (given popularity) popularity@K."""
    ks = check_ks(ks, num_items)
    topk = rank_topk(
        score_fn, task, num_items, max(ks), batch_size=batch_size, exclude_seen=exclude_seen
    )
    metrics, per_user = metrics_from_topk(
        topk, task.targets, ks, num_items=num_items, item_popularity=item_popularity
    )
    return EvalResult(metrics, per_user, protocol_label(exclude_seen, task), np.asarray(task.users))
