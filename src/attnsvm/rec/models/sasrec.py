"""SASRec (Kang & McAuley, ICDM 2018): causal self-attention over the item history.

``x = dropout(√d · E[s] + P)`` → ``num_blocks`` causal blocks → LayerNorm → ``h_t``; the next
item after position t is scored by ``h_t · E_i`` with the item table E (tied, or a separate
output table as in gSASRec). Every position is trained to predict the next item.

Defaults follow the official code and Klenitskiy & Vasilev's SASRec+ config: d = 64, 2 blocks,
1 head, FFN 64, dropout 0.1, max_len 200, the "sasrec" block layout (only the queries are
normalised), embeddings × √d (``scale_embeddings=True``; with Normal(0, 0.02) init the item
embeddings are otherwise swamped by the position embeddings early in training). Padding keys
are masked out of attention, as in the official TF code (the pmixer PyTorch port does not).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnsvm.rec.models.base import EncoderRecommender, TransformerConfig


@dataclass(frozen=True)
class SASRecConfig(TransformerConfig):
    """The ``TransformerConfig`` defaults (see the module docstring), plus one switch."""

    #: dropout on the attention output before the residual add; the official SASRec codes (TF,
    #: pmixer, K&V) have none there, only on the attention weights
    attention_output_dropout: bool = True


class SASRec(EncoderRecommender):
    objective = "causal"
    config_class = SASRecConfig
    padding_free = True

    def __init__(self, num_items: int, config: SASRecConfig | None = None) -> None:
        config = config or SASRecConfig()
        super().__init__(num_items, config)
        self.build_embeddings(layer_norm=False)
        self.encoder = self.build_encoder(
            causal=True, attention_output_dropout=config.attention_output_dropout
        )
        self.init_weights()
