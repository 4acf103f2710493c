"""The evaluation path as it was before score blocks and item ranges, written out to compare
against: ``score_function`` (each length group scored by ``score_last``, concatenated and put
back in row order) and ``rank_topk`` (the whole batch's scores masked and ranked at once)."""

import numpy as np
import torch

from attnsvm.rec.data.sequences import EvalTask
from attnsvm.rec.eval.ranking import batch_scores, check_item_ids, csr_block, trim_padding
from attnsvm.rec.train.scoring import SCORE_GROUP_ROWS, SCORE_LENGTH_GROUPS, autocast


def previous_score_function(model, task: EvalTask, device: torch.device, bf16: bool = False):
    max_len = model.config.max_len
    history = task.history
    columns = {
        "timestamps": (history.times, history.padded_times),
        "ratings": (history.ratings, history.padded_ratings),
    }

    def forward(windows: np.ndarray, rows: np.ndarray) -> torch.Tensor:
        width = windows.shape[1]
        available = {"users": torch.from_numpy(task.users[rows])}
        for name in model.extra_inputs:
            if name in columns and columns[name][0] is not None:
                available[name] = torch.from_numpy(columns[name][1](max_len, rows)[:, -width:])
        extras = {k: v.to(device) for k, v in model.extra_kwargs(**available).items()}
        with autocast(device, bf16):
            return model.score_last(torch.from_numpy(windows).to(device), **extras).float()

    def score(rows: np.ndarray) -> torch.Tensor:
        windows = history.padded(max_len, rows)
        if not model.padding_free:
            return forward(windows, rows)
        groups = min(SCORE_LENGTH_GROUPS, len(rows) // SCORE_GROUP_ROWS)
        if groups < 2:
            return forward(trim_padding(windows), rows)
        order = np.argsort((windows != 0).sum(axis=1), kind="stable")
        pieces = np.array_split(order, groups)
        scores = [forward(trim_padding(windows[piece]), rows[piece]) for piece in pieces]
        return torch.cat(scores)[torch.from_numpy(np.argsort(order, kind="stable"))]

    return score


def _mask_batch(scores, task: EvalTask, start: int, stop: int, exclude_seen: bool) -> None:
    scores[:, 0] = -torch.inf
    if not exclude_seen:
        return
    t_rows, t_items = (torch.from_numpy(a) for a in csr_block(task.targets, start, stop))
    e_rows, e_items = (torch.from_numpy(a) for a in csr_block(task.exclude, start, stop))
    target_scores = scores[t_rows, t_items]
    scores[e_rows, e_items] = -torch.inf
    scores[t_rows, t_items] = target_scores


def _topk_lower_id_first(scores: torch.Tensor, k: int):
    values, ids = torch.topk(scores, k + 1, dim=1)
    boundary = values[:, k - 1]
    ambiguous = torch.nonzero((values[:, k] == boundary) & (boundary > -torch.inf))[:, 0]
    values, ids = values[:, :k], ids[:, :k]
    if ambiguous.numel():
        order = torch.sort(scores[ambiguous], dim=1, descending=True, stable=True).indices
        ids[ambiguous] = order[:, :k]
        values[ambiguous] = torch.gather(scores[ambiguous], 1, ids[ambiguous])
    ids, by_id = torch.sort(ids, dim=1)
    values = torch.gather(values, 1, by_id)
    values, by_score = torch.sort(values, dim=1, descending=True, stable=True)
    ids = torch.gather(ids, 1, by_score)
    return values, ids.masked_fill_(values == -torch.inf, 0)


def previous_rank_topk(
    score_fn, task: EvalTask, num_items: int, k: int, batch_size: int, exclude_seen: bool = True
) -> np.ndarray:
    check_item_ids(task, num_items)
    out = np.zeros((len(task), k), dtype=np.int64)
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
            _mask_batch(scores, ordered, start, stop, exclude_seen)
            out[rows] = _topk_lower_id_first(scores, k)[1].numpy()
    return out
