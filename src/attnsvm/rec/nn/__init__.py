"""Shared neural blocks for sequential recommenders: embeddings, attention, blocks, FFN, losses."""

from attnsvm.rec.nn.attention import MultiHeadAttention, attention_mask, reference_attention
from attnsvm.rec.nn.blocks import (
    AttentionInput,
    EncoderOutput,
    TransformerBlock,
    TransformerEncoder,
)
from attnsvm.rec.nn.embedding import ItemEmbedding, SequenceEmbedding
from attnsvm.rec.nn.ffn import PointwiseFFN
from attnsvm.rec.nn.losses import (
    bce_loss,
    full_ce_loss,
    gbce_beta,
    gbce_loss,
    sampled_softmax_loss,
)

__all__ = [
    "AttentionInput",
    "EncoderOutput",
    "ItemEmbedding",
    "MultiHeadAttention",
    "PointwiseFFN",
    "SequenceEmbedding",
    "TransformerBlock",
    "TransformerEncoder",
    "attention_mask",
    "bce_loss",
    "full_ce_loss",
    "gbce_beta",
    "gbce_loss",
    "reference_attention",
    "sampled_softmax_loss",
]
