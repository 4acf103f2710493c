"""SRT (Scaling Sequential Recommendation Models with Transformers, Zivic et al., SIGIR 2024):
items encoded from their features, so the parameter count does not grow with the catalogue.

**The paper's** (its code, mercadolibre/srt ``sasrecf2.py``): an ID-free item tower, per item
the sum of its text tokens' embeddings per field, the fields concatenated and projected by an
adapter (``attnsvm.rec.nn.item_tower``); the sequence ``LN(e + P)``, dropout, a RecBole
transformer (post-LN, GELU, causal mask); the last position's state scored by dot product with
every item's tower vector; trained at the last position of every prefix with a sampled softmax
over popularity-drawn negatives, log-q corrected (the ``srt`` preset: 300 negatives, the 100K
config's); pre-trained on one catalogue and fine-tuned on another.

**Our reading, where we differ**: the official tokenizer is a SentencePiece BPE vocabulary of
30k trained on Amazon titles; no pretrained text model is downloaded here, so each field's
lower-cased words are hashed into ``num_buckets`` ids (``attnsvm.rec.data.features``), which
needs no vocabulary and gives a word the same id in every catalogue. Fields: MovieLens title and
genres, or S3-Rec attribute ids. Defaults are the fine-tuning "from scratch" config (2 layers,
d = 64, dropout 0.5, window 50); EWC, progressive unfreezing and layer-wise learning rates of
the official fine-tuning are not implemented (a fine-tune here is ``train.init_from``).

**Features.** ``features_dataset`` names the dataset whose items the model scores (the run's
``data.dataset``; ``features_root`` its ``data.root``): the model reads that catalogue's
external ids and the feature file beside the data (``movies.dat``, ``u.item``, ``movies.csv`` or
``*_item2attributes.json``, or ``features_file``). The token ids are not part of the weights,
so a run trained on ML-1M initialises one on ML-100K (``train.init_from``, strict or not) with
no id mapping, and items never seen in training are scored from their features.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import ClassVar

import torch

from attnsvm.rec.data.features import hashed_tokens, load_item_features
from attnsvm.rec.models.base import EncoderRecommender, TransformerConfig
from attnsvm.rec.nn.item_tower import FeatureItemTower


@dataclass(frozen=True)
class SRTConfig(TransformerConfig):
    ffn_optional: ClassVar[bool] = False
    num_heads: int = 2
    ffn_size: int = 256
    dropout: float = 0.5
    attention_dropout: float = 0.5
    max_len: int = 50
    norm: str = "post"
    activation: str = "gelu"
    scale_embeddings: bool = False
    objective: str = "last"  # "last" (the paper's) | "causal"
    features_dataset: str = ""
    features_root: str | None = None
    features_file: str | None = None
    num_buckets: int = 16384
    token_size: int = 64
    tokens_per_field: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        self._choice("objective", ("last", "causal"))
        for name, smallest in (("num_buckets", 2), ("token_size", 1), ("tokens_per_field", 1)):
            if getattr(self, name) < smallest:
                raise ValueError(
                    f"SRTConfig.{name} must be ≥ {smallest}, got {getattr(self, name)}"
                )
        if self.separate_output_embedding or self.item_dropout:
            raise ValueError(
                "SRTConfig: separate_output_embedding and item_dropout act on an item table, "
                "and SRT has none (its items come from their features)"
            )


class SRT(EncoderRecommender):
    objective = "last"
    config_class = SRTConfig
    padding_free = True
    trains_last_hidden = True

    def __init__(self, num_items: int, config: SRTConfig | None = None) -> None:
        config = config or SRTConfig()
        super().__init__(num_items, config)
        if not config.features_dataset:
            raise ValueError(
                "SRTConfig.features_dataset must name the dataset whose items the model "
                "scores, the run's data.dataset (e.g. --set model.features_dataset=ml-100k "
                "--set model.features_root=../shared/data)"
            )
        self.objective = config.objective
        features = load_item_features(
            config.features_dataset, config.features_root, config.features_file
        )
        if len(features.texts) != num_items + 1:
            raise ValueError(
                f"SRT: {config.features_dataset!r} has {len(features.texts) - 1} items and the "
                f"model {num_items}: features_dataset must be the run's dataset"
            )
        tokens = hashed_tokens(features, config.num_buckets, config.tokens_per_field)
        self.tower = FeatureItemTower(
            torch.from_numpy(tokens), config.num_buckets, config.token_size, config.hidden_size
        )
        self.embed = self.sequence_embedding(self.tower, layer_norm=True)
        self.encoder = self.build_encoder(causal=True)
        self.init_weights()

    def output_embedding(self) -> torch.Tensor:
        return self.tower.table()

    def training_step(self) -> AbstractContextManager:
        return self.tower.shared_table()

    def output_bias(self) -> None:
        return None
