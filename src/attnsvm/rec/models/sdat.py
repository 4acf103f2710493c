"""SDAT (Sequence and Distance Aware Transformer for Recommendation Systems, Zang et al., ICWS
2021), as reconstructed here: SASRec whose attention knows the time between events.

**What is the paper's and what is our reading.** Only the abstract could be read. From it: a
transformer over the items; attention focused on items at smaller time intervals; a time-gain
function that augments recent items; processed time information in place of the positional
encoding; a GRU aggregating item by item; event timestamps as input. The formulas are our
reading (spec: research ``remaining_models.md`` §8), each part a config switch, all in
``attnsvm.rec.nn.time_intervals``:

- ``interval_bias``: an additive attention bias from ``Δ_ij = t_i − t_j`` (each query's own
  time, so causal training stays exact), ``"log"``: ``−λ_h log(1 + Δ_ij / time_unit)`` with
  ``λ_h ≥ 0`` learned per head (ALiBi's distance penalty on log time intervals), or
  ``"bucket"``: a learned scalar per head and log₂ interval bucket (T5's relative-position
  buckets; TiSASRec's clipped intervals are the closest recommender analogue); ``"none"``;
- ``recency_gain``: each value scaled by ``1 + α_h exp(−Δ_ij / (time_unit · κ_h))`` (α from 0,
  κ from one unit, both learned per head); the softmax still decides the attention;
- ``time_encoding``: a learned embedding of each event's log₂ time bucket in place of the
  positions, either the gap since the previous event (``"gap"``, causal) or the age at the
  window's last event (``"age"``, the spec's reading, which reads the last event's time and so
  needs last-position training); ``"none"`` keeps SASRec's learned positions (``position``);
- ``gru_head``: a GRU over the encoder's outputs (``attnsvm.rec.nn.gru``), scored against the
  item table.

The pair terms are shared by all layers, as TiSASRec shares its interval embeddings. The rest is
SASRec: embeddings × √d, the "sasrec" block layout, all-position (causal) CE training by default.
With every switch off (``time_encoding = "none"``, ``position = "learned"``) it is SASRec, output
for output, with the same initial weights from the same seed (a test checks both).

**Timestamps are required** (``extra_inputs``): data without them is refused before training.
The stack is kept off the ``encoder`` attribute: the lens's last-position shortcut would leave
out the pair terms and the GRU, so the lens re-runs the whole model instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnsvm.rec.models.base import SequentialRecommender
from attnsvm.rec.models.sasrec import SASRecConfig
from attnsvm.rec.nn.gru import GRUHead
from attnsvm.rec.nn.time_intervals import (
    BIASES,
    ENCODINGS,
    IntervalBias,
    RecencyGain,
    TimeEncoding,
    pair_intervals,
)


@dataclass(frozen=True)
class SDATConfig(SASRecConfig):
    """SASRec's fields (see its module) plus the switches of the module docstring."""

    position: str = "none"  # the time encoding takes the positions' place
    interval_bias: str = "log"
    recency_gain: bool = True
    time_encoding: str = "gap"
    gru_head: bool = True
    time_unit: float = 86400.0  # seconds per unit of Δ in the bias and the gain (one day)
    time_buckets: int = 32
    objective: str = "causal"  # "causal" | "last"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._choice("interval_bias", (*BIASES, "none"))
        self._choice("time_encoding", (*ENCODINGS, "none"))
        self._choice("objective", ("causal", "last"))
        if not self.time_unit > 0:
            raise ValueError(f"SDATConfig.time_unit must be > 0, got {self.time_unit}")
        if self.time_buckets < 2:
            raise ValueError(f"SDATConfig.time_buckets must be ≥ 2, got {self.time_buckets}")
        if self.time_encoding == "age" and self.objective != "last":
            raise ValueError(
                "SDATConfig.time_encoding 'age' measures every event from the window's last one, "
                "so under all-position (causal) training a position would read the time of "
                "events after it: use objective 'last', or time_encoding 'gap'"
            )


class SDAT(SequentialRecommender):
    objective = "causal"
    config_class = SDATConfig
    extra_inputs = ("timestamps",)
    padding_free = True  # per-pair terms, per-event encodings, a GRU over real items only

    def __init__(self, num_items: int, config: SDATConfig | None = None) -> None:
        config = config or SDATConfig()
        super().__init__(num_items, config)
        self.objective = config.objective
        self.build_embeddings(layer_norm=False)
        self.stack = self.build_encoder(
            causal=True, attention_output_dropout=config.attention_output_dropout
        )
        heads, unit, buckets = config.num_heads, config.time_unit, config.time_buckets
        self.time_encoding = None
        if config.time_encoding != "none":
            self.time_encoding = TimeEncoding(config.time_encoding, config.hidden_size, buckets)
        self.interval_bias = None
        if config.interval_bias != "none":
            self.interval_bias = IntervalBias(config.interval_bias, heads, unit, buckets)
        self.recency_gain = RecencyGain(heads, unit) if config.recency_gain else None
        self.gru = GRUHead(config.hidden_size) if config.gru_head else None
        self.init_weights()

    def _encode(self, item_seq, timestamps, last_query_only: bool) -> torch.Tensor:
        self.check_input(item_seq)
        if timestamps is None or timestamps.shape != item_seq.shape:
            got = None if timestamps is None else tuple(timestamps.shape)
            raise ValueError(
                f"SDAT needs timestamps (B, L) aligned with item_seq {tuple(item_seq.shape)}, "
                f"got {got}: its attention reads the time between events"
            )
        valid = item_seq != 0
        times = timestamps.double()  # unix seconds: float32 would round them to minutes
        added = None if self.time_encoding is None else self.time_encoding(times, valid)
        x = self.embed(item_seq, added)
        pair = {}
        if self.interval_bias is not None or self.recency_gain is not None:
            seconds = pair_intervals(times)
            if self.interval_bias is not None:
                pair["pair_bias"] = self.interval_bias(seconds, x.dtype)
            if self.recency_gain is not None:
                pair["value_gain"] = self.recency_gain(seconds, x.dtype)
        hidden = self.stack(x, valid, last_query_only and self.gru is None, **pair)
        return hidden if self.gru is None else self.gru(hidden, valid)

    def forward(
        self, item_seq: torch.Tensor, timestamps: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self._encode(item_seq, timestamps, last_query_only=False)

    def last_hidden(
        self, item_seq: torch.Tensor, timestamps: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self._encode(item_seq, timestamps, last_query_only=True)[:, -1]
