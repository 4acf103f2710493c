"""Sequential recommenders by name: the model protocol, SASRec, BERT4Rec, presets and losses."""

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.models.bert4rec import BERT4Rec, BERT4RecConfig
from attnsvm.rec.models.registry import (
    MODELS,
    PRESETS,
    ModelSpec,
    Preset,
    build_model,
    catalogue,
    resolve,
)
from attnsvm.rec.models.sasrec import SASRec, SASRecConfig
from attnsvm.rec.nn.losses import LossConfig

__all__ = [
    "MODELS",
    "PRESETS",
    "BERT4Rec",
    "BERT4RecConfig",
    "LossConfig",
    "ModelSpec",
    "Preset",
    "SASRec",
    "SASRecConfig",
    "SequentialRecommender",
    "TransformerConfig",
    "build_model",
    "catalogue",
    "resolve",
]
