"""PI-Transformer ("privileged information"), after Bornschein, Li & Rannen-Triki, "Transformers
for Supervised Online Continual Learning" (arXiv 2403.01554, DeepMind), moved to an event stream.

**What is the paper's.** A stream of examples (x_t, y_t) is predicted online, p(y_t | x_t,
D_<t): a transformer attends over the C most recent examples *with their labels* (the labels are
privileged information: they reach the attention's keys and values), never over the label of the
example it predicts; it is trained by online SGD on chunks with a Transformer-XL memory of the
previous chunk (stop-gradient) and replay streams (``attnsvm.rec.stream``).

**What is our reading** (only third-party summaries of the paper could be read here, and the
paper is about image geo-localisation, not recommendation; the transfer is our design):

- an event of the global log is ``x_t`` = the user's previous ``max_len`` items (their own
  history), embedded by a causal SASRec-style encoder ``f`` (``num_blocks`` blocks, the last
  position's state), and ``y_t`` = the item, embedded by ``g`` (the item table, scaled by √d as
  the inputs are: ``label_table = "tied"``, or a table of its own: ``"separate"``);
- the wiring is two-stream (as XLNet's), with one set of block weights for both streams:
  a *labelled* stream ``p_s = f(x_s) + g(y_s)`` runs causally over the chunk (and the memory),
  and a *query* stream ``q_t = f(x_t)`` attends to the labelled stream strictly before t (the
  memory included) and to itself only; the prediction reads the query stream. So y_t reaches
  every later prediction and never its own (a test changes y_t and checks);
- ``context_blocks`` pre-LN blocks of this two-stream attention; no position encoding over the
  global window (the causal mask gives the order; time features of x_t are left out); the
  history encoder ``f`` has SASRec+'s defaults (d 64, 2 blocks, 1 head, the "sasrec" layout),
  so that against the online SASRec+ baseline the context is the only difference;
- the Transformer-XL memory is each context block's labelled-stream input over the previous
  chunk, detached; logits are tied to the item table, as SASRec's.

Without a stream (``forward(item_seq)``) the model is its history encoder ``f``: the platform's
protocol, used by nothing but the lens. The stream runner calls ``stream_hidden``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnsvm.rec.models.base import EncoderRecommender, TransformerConfig
from attnsvm.rec.nn.attention import MultiHeadAttention
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.ffn import PointwiseFFN

LABEL_TABLES = ("tied", "separate")


@dataclass(frozen=True)
class PITransformerConfig(TransformerConfig):
    """The history encoder's fields (``TransformerConfig``) and the context's."""

    max_len: int = 50  # the user's own history in x_t
    context_blocks: int = 2  # two-stream blocks over the global window of events
    label_table: str = "tied"  # g(y): "tied" (the item table × √d) | "separate"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.context_blocks < 1:
            raise ValueError(
                f"PITransformerConfig.context_blocks must be ≥ 1, got {self.context_blocks}"
            )
        self._choice("label_table", LABEL_TABLES)


class TwoStreamBlock(nn.Module):
    """One pre-LN block applied to both streams: the labelled one causally over memory + chunk,
    the query one over the labelled stream strictly before it and itself."""

    def __init__(self, config: PITransformerConfig) -> None:
        super().__init__()
        dim = config.hidden_size
        self.attention = MultiHeadAttention(dim, config.num_heads, config.attention_dropout)
        self.attention_norm = nn.LayerNorm(dim)
        self.ffn = PointwiseFFN(dim, config.ffn_size, config.activation, config.dropout)
        self.ffn_norm = nn.LayerNorm(dim)
        self.dropout = Dropout(config.dropout)

    def forward(
        self, query: torch.Tensor, labelled: torch.Tensor, memory: torch.Tensor, *, last: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``query``, ``labelled`` (1, C, D) and ``memory`` (1, M, D) → the two streams' outputs;
        ``last``: the final block, whose labelled output nothing reads (None)."""
        chunk, remembered = labelled.shape[1], memory.shape[1]
        keys = self.attention_norm(torch.cat([memory, labelled], dim=1))
        queries = self.attention_norm(query)
        device = query.device
        past = torch.ones(chunk, remembered, dtype=torch.bool, device=device)
        causal = torch.ones(chunk, chunk, dtype=torch.bool, device=device).tril()
        own = torch.eye(chunk, dtype=torch.bool, device=device)
        labelled_mask = torch.cat([past, causal], dim=1)[None, None]
        # the query at t: labelled events before t (never t's own label), and itself
        query_mask = torch.cat([past, causal & ~own, own], dim=1)[None, None]
        query = query + self.dropout(
            self.attention(queries, torch.cat([keys, queries], dim=1), query_mask)
        )
        if last:
            return self._feed_forward(query), None
        labelled = labelled + self.dropout(
            self.attention(keys[:, remembered:], keys, labelled_mask)
        )
        return self._feed_forward(query), self._feed_forward(labelled)

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ffn(self.ffn_norm(x))


class PITransformer(EncoderRecommender):
    objective = "causal"
    config_class = PITransformerConfig
    padding_free = True

    def __init__(self, num_items: int, config: PITransformerConfig | None = None) -> None:
        config = config or PITransformerConfig()
        super().__init__(num_items, config)
        self.build_embeddings(layer_norm=False)
        self.encoder = self.build_encoder(causal=True)
        self.labels = (
            nn.Embedding(num_items + 1, config.hidden_size, padding_idx=0)
            if config.label_table == "separate"
            else None
        )
        self.context = nn.ModuleList(TwoStreamBlock(config) for _ in range(config.context_blocks))
        self.context_norm = nn.LayerNorm(config.hidden_size)
        self.init_weights()

    def label_embedding(self, labels: torch.Tensor) -> torch.Tensor:
        """g(y): (C,) item ids → (C, D)."""
        if self.labels is not None:
            return self.labels(labels)
        return self.items(labels) * math.sqrt(self.config.hidden_size)

    def stream_hidden(
        self,
        histories: torch.Tensor,
        labels: torch.Tensor,
        memory: list[torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One chunk of C events: ``histories`` (C, max_len) left-padded, ``labels`` (C,).

        Returns the (C, D) states that score each event's item (its own label unseen) and the
        memory for the next chunk: per context block its labelled-stream input, detached.
        ``memory``: the previous chunk's, or None (nothing before this chunk)."""
        if labels.shape != histories.shape[:1]:
            raise ValueError(
                f"labels {tuple(labels.shape)} do not fit histories {tuple(histories.shape)}"
            )
        state = self.last_hidden(histories)[None]  # f(x_t): (1, C, D)
        query, labelled = state, state + self.label_embedding(labels)[None]
        empty = state.new_zeros(1, 0, state.shape[-1])
        next_memory = []
        for index, block in enumerate(self.context):
            next_memory.append(labelled[0].detach())
            remembered = empty if memory is None else memory[index][None]
            last = index == len(self.context) - 1
            query, labelled = block(query, labelled, remembered, last=last)
        return self.context_norm(query[0]), next_memory
