"""Shared neural blocks for sequential recommenders: embeddings, attention, blocks, FFN, losses."""

from attnsvm.rec.nn.attention import (
    AttentionInput,
    AttentionRecorder,
    MultiHeadAttention,
    attention_mask,
    record_attention,
    reference_attention,
)
from attnsvm.rec.nn.block_attention import BlockAttention, LongShortAttention
from attnsvm.rec.nn.blocks import TransformerBlock, TransformerEncoder
from attnsvm.rec.nn.embedding import ItemEmbedding, SequenceEmbedding
from attnsvm.rec.nn.ffn import PointwiseFFN
from attnsvm.rec.nn.gru import GRUHead
from attnsvm.rec.nn.item_tower import FeatureItemTower
from attnsvm.rec.nn.local_attention import LocalAttention
from attnsvm.rec.nn.losses import (
    bce_loss,
    full_ce_loss,
    gbce_beta,
    gbce_loss,
    sampled_softmax_loss,
)

__all__ = [
    "AttentionInput",
    "AttentionRecorder",
    "BlockAttention",
    "FeatureItemTower",
    "GRUHead",
    "ItemEmbedding",
    "LocalAttention",
    "LongShortAttention",
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
    "record_attention",
    "reference_attention",
    "sampled_softmax_loss",
]
