"""Full-catalogue ranking: streaming top-k over batches of users, with the seen-item filter.

A model is seen only through a score function ``score_fn(rows) -> (len(rows), num_items + 1)``
tensor; column 0 is padding and is never recommended. The ranker owns the returned tensor and
modifies it in place. Only one batch of scores exists at a time, so memory is
batch × items, never users × items. A score function may also hand its scores over as blocks
(``ScoreBlock``: a model's length groups, each scored a range of items at a time), so that
nothing is copied to put rows back in order and, over a large catalogue, only a range of a
block's scores exists at a time (``item_ranges``); the ranking is the same either way.

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
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from attnsvm._atomic import atomic_path, write_bytes
from attnsvm._files import open_regular, read_text
from attnsvm.errors import UnreadableFile, cut
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.eval.estimates import Estimates
from attnsvm.rec.eval.exclusions import Exclusions
from attnsvm.rec.eval.metrics import check_ks, metrics_from_topk
from attnsvm.rec.eval.topk import first_by_score_then_id, top_by_score_then_id

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


@dataclass(frozen=True)
class ScoreBlock:
    """Rows of one batch that a score function scores together: ``positions`` index the batch's
    rows, and ``scores(start, stop)`` gives their ``(len(positions), stop − start)`` scores of
    item ids ``start..stop − 1`` as a tensor the ranker may modify in place. A model's scores
    come as one block per length group (``scoring.ModelScores``), so no score is copied back
    into its batch's order, and item range by item range, so a block's scores over a large
    catalogue never exist all at once. ``estimates``, where given, rank a catalogue scored in
    ranges from bfloat16 estimates with the same result (``estimates.Estimates``)."""

    positions: np.ndarray
    scores: Callable[[int, int], torch.Tensor]
    estimates: Estimates | None = None


def score_blocks(score_fn: ScoreFn, rows: np.ndarray, num_items: int) -> Iterable[ScoreBlock]:
    """``score_fn``'s own blocks for ``rows`` where it has them (a ``blocks`` method, as
    ``scoring.ModelScores``), else one block over the whole batch, scored by one call."""
    blocks = getattr(score_fn, "blocks", None)
    if blocks is not None:
        return blocks(rows)
    scores = batch_scores(score_fn, rows, num_items)
    return [ScoreBlock(np.arange(rows.size), lambda start, stop: scores[:, start:stop])]


#: up to this many scores (rows × catalogue) a block is scored and ranked over the whole
#: catalogue at once, exactly as before ranges existed (every dataset in ../shared/data: at
#: most 512 × 54,543); beyond, in ranges of items
SCORE_WHOLE_ELEMENTS = 2**25
#: a catalogue wider than this is always ranked in ranges, however few the block's rows: a
#: whole row of scores then outgrows the caches, and the product writing it runs at a third of
#: the speed of range-sized products (every dataset in ../shared/data stays below it)
SCORE_WHOLE_ITEMS = 2**16
#: scores in one range: at most this many exist at once, and a range stays below glibc's mmap
#: threshold (``attnsvm.process``), so its buffer is reused instead of page-faulting in afresh
SCORE_RANGE_ELEMENTS = 2**22
#: ranges hold a multiple of this many items (the tile of ``scoring.SCORE_TILE_ITEMS``)
SCORE_RANGE_ALIGN = 4096


def item_ranges(rows: int, num_items: int, item_chunk: int | None = None) -> list[tuple[int, int]]:
    """``(start, stop)`` item-id ranges covering ``0..num_items`` that a block of ``rows`` rows
    is ranked in: ``item_chunk`` items each where given, else the whole catalogue at once while
    the block holds at most ``SCORE_WHOLE_ELEMENTS`` scores and the catalogue at most
    ``SCORE_WHOLE_ITEMS`` items, else ranges of an aligned width holding about
    ``SCORE_RANGE_ELEMENTS``."""
    width = num_items + 1
    if item_chunk is not None:
        if item_chunk < 1:
            raise ValueError(f"item_chunk={item_chunk} must be >= 1")
        width = item_chunk
    elif rows * (num_items + 1) > SCORE_WHOLE_ELEMENTS or num_items + 1 > SCORE_WHOLE_ITEMS:
        fitting = SCORE_RANGE_ELEMENTS // rows
        width = max(SCORE_RANGE_ALIGN, fitting - fitting % SCORE_RANGE_ALIGN)
    return [(start, min(start + width, num_items + 1)) for start in range(0, num_items + 1, width)]


def rank_block(
    block: ScoreBlock,
    exclusions: Exclusions,
    num_items: int,
    k: int,
    item_chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A block's top-k ``(scores, item ids)`` over items 1..num_items, ids 0 at -inf, with its
    batch's ``exclusions`` applied. Ranked range by range (``item_ranges``): every range's own
    top-k by (score desc, id asc) is merged into the running top-k, which is exactly the top-k
    of the whole row since that order is total (no two items share an id). A block with
    ``estimates`` gives from each range only the items that may enter the top-k, scored in
    float32 (``Estimates.candidates``), or the range's top-k where too many may."""
    rows = block.positions.size
    mine = exclusions.of_block(block.positions)
    ranges = item_ranges(rows, num_items, item_chunk)
    if len(ranges) > 1:
        mine = mine.by_item()
    best: tuple[torch.Tensor, torch.Tensor] | None = None
    for start, stop in ranges:
        in_range = mine.within(start, stop) if len(ranges) > 1 else mine
        part = None
        if block.estimates is not None:
            kth = torch.full((rows,), -torch.inf)
            if best is not None and best[0].shape[1] >= k:
                kth = best[0][:, k - 1]
            part = block.estimates.candidates(start, stop, in_range, k, kth)
        values, ids = part if part is not None else range_top(block, in_range, start, stop, k)
        if best is not None:
            values = torch.cat([best[0], values], dim=1)
            ids = torch.cat([best[1], ids], dim=1)
            values, ids = first_by_score_then_id(values, ids, k)
        best = values, ids
    values, ids = best
    if values.shape[1] < k:  # estimates found fewer than k rankable items in every row
        values = torch.nn.functional.pad(values, (0, k - values.shape[1]), value=-torch.inf)
        ids = torch.nn.functional.pad(ids, (0, k - ids.shape[1]))
    return values, ids.masked_fill_(values == -torch.inf, 0)


def range_top(
    block: ScoreBlock, exclusions: Exclusions, start: int, stop: int, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k ``(scores, item ids)`` of items start..stop − 1 from the block's scores, with
    ``exclusions`` (those of the range) applied."""
    rows = block.positions.size
    scores = block.scores(start, stop)
    if not isinstance(scores, torch.Tensor) or scores.shape != (rows, stop - start):
        shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores)
        raise ValueError(
            f"a score block returned {shape} for items {start}..{stop - 1}; "
            f"expected ({rows}, {stop - start})"
        )
    if not scores.is_floating_point():
        scores = scores.to(torch.float64)
    if start == 0:
        scores[:, 0] = -torch.inf  # the padding id
    exclusions.apply(scores, start)
    values, ids = top_by_score_then_id(scores, k)
    if start:
        ids += start
    return values, ids


def rank_topk(
    score_fn: ScoreFn,
    task: EvalTask,
    num_items: int,
    k: int = 100,
    *,
    batch_size: int = 1024,
    exclude_seen: bool = True,
    item_chunk: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """``(len(task), k)`` int64 item ids, best first, ranking the whole catalogue 1..num_items.

    Rows are scored in batches of similar history length (longest first), so a score function
    that trims the padding its batch does not need (:func:`trim_padding`) computes little of it;
    each row's result does not depend on its batch. ``item_chunk`` fixes the width of the item
    ranges a batch is ranked in (``item_ranges``; the result does not depend on it);
    ``progress(done, total)`` is called as rows are ranked.
    """
    if not 1 <= k <= num_items:
        raise ValueError(f"k={k} must be in 1..num_items={num_items}")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    check_item_ids(task, num_items)
    out = np.zeros((len(task), k), dtype=np.int64)
    done = 0
    for rows, ids, _ in ranked_batches(
        score_fn,
        task,
        num_items,
        k,
        batch_size=batch_size,
        exclude_seen=exclude_seen,
        item_chunk=item_chunk,
    ):
        out[rows] = ids.cpu().numpy()
        done += rows.size
        if progress is not None:
            progress(done, len(task))
    return out


def ranked_batches(
    score_fn: ScoreFn,
    task: EvalTask,
    num_items: int,
    k: int,
    *,
    batch_size: int = 1024,
    exclude_seen: bool = True,
    item_chunk: int | None = None,
) -> Iterator[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
    """``(rows, item ids (B, k), scores (B, k))`` per block of task rows (``score_blocks``; a
    batch, or a length group of one), longest histories first (ids 0 where fewer than k items
    are rankable); the caller has checked ``k`` and ``batch_size``. ``rank_topk`` keeps the ids;
    bulk recommendation keeps the scores too. Only the rows' metadata is put in batch order:
    scores stay where the score function wrote them."""
    order = np.argsort(-task.history.lengths, kind="stable")
    # the rows' exclusion lists put in batch order once: metadata, where the scores never move
    exclude = task.exclude.select(order) if exclude_seen else None
    targets = task.targets.select(order) if exclude_seen else None
    with torch.inference_mode():
        for start in range(0, len(task), batch_size):
            stop = min(start + batch_size, len(task))
            rows = order[start:stop]
            exclusions = (
                Exclusions(*csr_block(exclude, start, stop), *csr_block(targets, start, stop))
                if exclude_seen
                else Exclusions.none()
            )
            for block in score_blocks(score_fn, rows, num_items):
                values, ids = rank_block(block, exclusions, num_items, k, item_chunk)
                block_rows = rows[block.positions]
                check_no_nan(values[:, 0], block_rows)
                yield block_rows, ids, values


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
