"""The model side of a stream run: the model a ``StreamConfig`` names, its states for a chunk,
and how a chunk is scored before it is learned from.

A model of ``STREAM_MODELS`` (``pi-transformer``) reads the chunk's labels as privileged keys
and values and keeps a Transformer-XL memory; any causal registry model (``sasrec+``, the online
baseline) scores each event from the user's own history alone (``last_hidden``), with no memory.

Scoring (``score_chunk``), per event: the log-loss is the cross-entropy of the model's softmax over
its whole item table (what it is trained on); HR@k and NDCG@k rank the candidates of
``stream.rank_over`` (``seen``: the items met in the stream before the chunk; ``all``: the whole
catalogue), ties towards the lower item id as everywhere in the platform, nothing excluded
(a user's earlier items stay candidates: the stream has no seen-item filter). An event whose item
is not a candidate (new to the stream) is a miss, counted in ``new_items``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from attnsvm.rec.config_base import ConfigError
from attnsvm.rec.models.base import SequentialRecommender
from attnsvm.rec.models.pitransformer import PITransformer
from attnsvm.rec.models.registry import MODELS, resolve
from attnsvm.rec.stream.config import STREAM_MODELS, StreamConfig

Memory = list[torch.Tensor] | None


def build_stream_model(
    config: StreamConfig, num_items: int
) -> tuple[SequentialRecommender, dict[str, Any]]:
    """The model of ``config`` (initialised from ``stream.seed``) and its ``model.json``."""
    torch.manual_seed(config.stream.seed)
    if config.model in STREAM_MODELS:
        config_class, model_class = STREAM_MODELS[config.model]
        model_config = config_class.from_dict(config.model_config())
    else:
        name, model_config, _ = resolve(config.model, **config.model_config())
        model_class = MODELS[name].model_class
        if model_class.objective != "causal" or model_class.extra_inputs:
            raise ConfigError(
                f"model {config.model!r} cannot run on a stream: it needs a causal model scored "
                f"from the history alone (pi-transformer, sasrec+, sasrec, …)"
            )
    model = model_class(num_items, model_config)
    return model, {"model": config.model, "model_config": model_config.to_dict()}


def chunk_states(
    model: SequentialRecommender,
    histories: torch.Tensor,
    labels: torch.Tensor,
    memory: Memory,
) -> tuple[torch.Tensor, Memory]:
    """``(C, D)`` states scoring each event of a chunk, and the memory for the next chunk."""
    if isinstance(model, PITransformer):
        return model.stream_hidden(histories, labels, memory)
    return model.last_hidden(histories), None


@dataclass
class Totals:
    """Sums over the events scored so far (``metrics`` turns them into means)."""

    events: int = 0
    log_loss: float = 0.0
    hits: float = 0.0
    ndcg: float = 0.0
    new_items: int = 0

    def add(self, other: Totals) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    def metrics(self, k: int) -> dict[str, float]:
        count = max(self.events, 1)
        return {
            "events": self.events,
            "log_loss": self.log_loss / count,
            f"HR@{k}": self.hits / count,
            f"NDCG@{k}": self.ndcg / count,
            "new_items": self.new_items,
        }


def score_chunk(
    logits: torch.Tensor, targets: torch.Tensor, candidates: torch.Tensor | None, k: int
) -> Totals:
    """The sums of a chunk: ``logits`` (C, num_items + 1) with column 0 = −∞, ``targets`` (C,),
    ``candidates`` (num_items + 1,) bool (None: every item)."""
    log_loss = F.cross_entropy(logits.float(), targets, reduction="sum")
    ranked = logits if candidates is None else logits.masked_fill(~candidates, float("-inf"))
    target = ranked.gather(1, targets[:, None])
    ids = torch.arange(logits.shape[1], device=logits.device)
    above = (ranked > target).sum(1) + ((ranked == target) & (ids < targets[:, None])).sum(1)
    rankable = torch.isfinite(target[:, 0])
    hit = rankable & (above < k)
    gain = torch.where(
        hit, 1.0 / torch.log2(above.double() + 2.0), torch.zeros((), dtype=torch.float64)
    )
    return Totals(
        events=int(targets.numel()),
        log_loss=float(log_loss),
        hits=float(hit.sum()),
        ndcg=float(gain.sum()),
        new_items=int((~rankable).sum()),
    )
