"""Models and presets by name.

A model is a file with a config dataclass and a ``SequentialRecommender``; registering it is one
line in ``MODELS``. A preset is a model name plus config overrides plus the loss it is trained
with (``LossConfig``); ``build_model`` and ``resolve`` accept either kind of name (a preset
named like a model, such as ``sasrec``, is that model with its paper's loss).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from attnsvm.rec.models.actsr import ACTSR, ACTSRConfig
from attnsvm.rec.models.adamct import AdaMCT, AdaMCTConfig
from attnsvm.rec.models.adt import ADT, ADTConfig
from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.models.bert4rec import BERT4Rec, BERT4RecConfig
from attnsvm.rec.models.bicat import BiCAT, BiCATConfig
from attnsvm.rec.models.bsarec import BSARec, BSARecConfig
from attnsvm.rec.models.convformer import ConvFormer, ConvFormerConfig
from attnsvm.rec.models.etrec import ETRec, ETRecConfig
from attnsvm.rec.models.knn import BASELINES, baseline_fields
from attnsvm.rec.models.matrrec import MaTrRec, MaTrRecConfig
from attnsvm.rec.models.mrtransformer import MrTransformer, MrTransformerConfig
from attnsvm.rec.models.nstransformer import NSTransformer, NSTransformerConfig
from attnsvm.rec.models.rlt4rec import RLT4Rec, RLT4RecConfig
from attnsvm.rec.models.sasrec import SASRec, SASRecConfig
from attnsvm.rec.models.sdat import SDAT, SDATConfig
from attnsvm.rec.models.smm import SMM, SMMConfig
from attnsvm.rec.models.srt import SRT, SRTConfig
from attnsvm.rec.models.ssept import SSEPT, SSEPTConfig
from attnsvm.rec.models.strec import STRec, STRecConfig
from attnsvm.rec.nn.losses import LossConfig


class ModelSpec(NamedTuple):
    config_class: type[TransformerConfig]
    model_class: type[SequentialRecommender]
    description: str


MODELS: dict[str, ModelSpec] = {
    "sasrec": ModelSpec(SASRecConfig, SASRec, "causal self-attention recommender (Kang 2018)"),
    "bert4rec": ModelSpec(BERT4RecConfig, BERT4Rec, "bidirectional cloze recommender (Sun 2019)"),
    "bsarec": ModelSpec(BSARecConfig, BSARec, "Fourier filter beside self-attention (Shin 2024)"),
    "ssept": ModelSpec(SSEPTConfig, SSEPT, "SASRec + user embedding + SSE regulariser (Wu 2020)"),
    "actsr": ModelSpec(ACTSRConfig, ACTSR, "attention calibration plug-in (Zhou 2023)"),
    "convformer": ModelSpec(ConvFormerConfig, ConvFormer, "large-kernel conv mixer (Wang 2023)"),
    "adamct": ModelSpec(AdaMCTConfig, AdaMCT, "attention + CNN, per-user gate (Jiang 2023)"),
    "matrrec": ModelSpec(MaTrRecConfig, MaTrRec, "Mamba block + transformer layer (Zhang 2024)"),
    "strec": ModelSpec(STRecConfig, STRec, "time-scored sparse cross-attention pyramid (Li 2023)"),
    "adt": ModelSpec(ADTConfig, ADT, "SASRec + head-independence and reconstruction (ADT 2023)"),
    "bicat": ModelSpec(BiCATConfig, BiCAT, "SASRec, reverse pre-training + self-KD (Jiang 2021)"),
    "mrtransformer": ModelSpec(
        MrTransformerConfig, MrTransformer, "preference tokens, coverage, swap (Ma 2023)"
    ),
    "etrec": ModelSpec(ETRecConfig, ETRec, "local + block attention, shared FFN (ETRec 2023)"),
    "sdat": ModelSpec(SDATConfig, SDAT, "time-interval attention bias and gain, GRU (Zang 2021)"),
    "srt": ModelSpec(SRTConfig, SRT, "ID-free item tower from item features (Zivic 2024)"),
    "rlt4rec": ModelSpec(RLT4RecConfig, RLT4Rec, "reward-conditioned (rating, item) tokens (2024)"),
    "smm": ModelSpec(SMMConfig, SMM, "masked-last over session prefixes, CoPE (Redjdal 2024)"),
    "nstransformer": ModelSpec(NSTransformerConfig, NSTransformer, "NS-attention pointwise (2024)"),
}


@dataclass(frozen=True)
class Preset:
    model: str
    description: str
    loss: LossConfig
    overrides: dict[str, Any] = field(default_factory=dict)


# the official SASRec-style codes sum BCE's two terms; the platform's BCE is their mean
OFFICIAL_BCE = LossConfig(name="bce", num_negatives=1, negatives_avoid_row=True, scale=2.0)
# defineZYP/ADT sasrec/templates/*.json and utils.get_lambdas (d 256, FFN 256, dropout 0.5)
ADT_OFFICIAL = {
    "hidden_size": 256,
    "ffn_size": 256,
    "num_blocks": 2,
    "num_heads": 2,
    "dropout": 0.5,
    "attention_dropout": 0.5,
    "attention_output_dropout": False,
    "init": "xavier_normal",
}

PRESETS: dict[str, Preset] = {
    "sasrec": Preset(
        "sasrec",
        "SASRec as published: BCE with 1 uniform negative per position",
        LossConfig(name="bce", num_negatives=1),
    ),
    "sasrec+": Preset(
        "sasrec",
        "SASRec+ (Klenitskiy & Vasilev 2023): full softmax CE; d=64, 2 blocks, 1 head, len 200",
        LossConfig(name="ce"),
        {"hidden_size": 64, "num_blocks": 2, "num_heads": 1, "ffn_size": 64, "max_len": 200},
    ),
    "gsasrec": Preset(
        "sasrec",
        "gSASRec (Petrov & Macdonald 2023): gBCE, 256 negatives, t=0.75, separate output table",
        LossConfig(name="gbce", num_negatives=256, gbce_t=0.75),
        {
            "hidden_size": 128,
            "ffn_size": 128,
            "num_blocks": 2,
            "num_heads": 1,
            "dropout": 0.5,
            "attention_dropout": 0.5,
            "max_len": 200,
            "separate_output_embedding": True,
        },
    ),
    "bert4rec": Preset(
        "bert4rec",
        "BERT4Rec as published: cloze training, full softmax CE over masked positions",
        LossConfig(name="ce"),
    ),
    "adt": Preset("adt", "ADT with its official BCE (the λ in the model config)", OFFICIAL_BCE),
    "adt-ml-1m": Preset(
        "adt",
        "ADT as in the official ML-1M run: its λ1, λ2, ‖E‖ weight and template",
        OFFICIAL_BCE,
        {
            **ADT_OFFICIAL,
            "max_len": 200,
            "reconstruction_weights": "0.104292,0.065892",
            "independence_weights": "0.100833,0.000607",
            "embedding_norm_weight": 1e-3,
        },
    ),
    "adt-beauty": Preset(
        "adt",
        "ADT as in the official Beauty (BERT4Rec version) run: its λ1, λ2, ‖E‖ weight, template",
        OFFICIAL_BCE,
        {
            **ADT_OFFICIAL,
            "max_len": 50,
            "reconstruction_weights": "0.0124,0.122",
            "independence_weights": "0.0001,0.0",
            "embedding_norm_weight": 1e-4,
        },
    ),
    "bicat": Preset(
        "bicat",
        "BiCAT's Beauty network and BCE (stages and their weights: attnsvm train --recipe bicat)",
        OFFICIAL_BCE,
        {
            "hidden_size": 128,
            "ffn_size": 128,
            "num_blocks": 2,
            "num_heads": 4,
            "dropout": 0.7,
            "attention_dropout": 0.7,
            "attention_output_dropout": False,
            "max_len": 100,
            "init": "xavier_normal",
        },
    ),
    "srt": Preset(
        "srt",
        "SRT as published: sampled softmax, 300 popularity negatives, log-q corrected",
        LossConfig(
            name="sampled_softmax", num_negatives=300, sampler="popularity", logq_correction=True
        ),
    ),
}


def _lookup(name: str) -> Preset:
    if name in PRESETS:
        return PRESETS[name]
    if name in MODELS:
        return Preset(name, MODELS[name].description, LossConfig())
    known = ", ".join(names())
    raise ValueError(f"unknown model {name!r} (known: {known})")


def resolve(name: str, **overrides: Any) -> tuple[str, TransformerConfig, LossConfig]:
    """``(model name, its config with the preset's and the given overrides, loss config)``."""
    preset = _lookup(name)
    config_class = MODELS[preset.model].config_class
    return preset.model, config_class.from_dict({**preset.overrides, **overrides}), preset.loss


def build_model(name: str, num_items: int, **overrides: Any) -> SequentialRecommender:
    """A model or preset by name, with config overrides (``hidden_size=128``, …)."""
    model_name, config, _ = resolve(name, **overrides)
    return MODELS[model_name].model_class(num_items, config)


@dataclass(frozen=True)
class Entry:
    """What a model name stands for: a model, a preset of one, or a non-neural baseline."""

    name: str
    kind: str  # "model" | "preset" | "baseline"
    description: str
    fields: dict[str, Any]  # the settings it takes, by name, with their types

    @property
    def baseline(self) -> bool:
        return self.kind == "baseline"


def names() -> list[str]:
    """Every name ``lookup`` knows, sorted."""
    return sorted(set(MODELS) | set(PRESETS) | set(BASELINES))


def lookup(name: str) -> Entry:
    """The one place that tells models, presets and baselines apart."""
    if name in BASELINES:
        return Entry(name, "baseline", BASELINES[name][1], baseline_fields(name))
    preset = _lookup(name)  # a ValueError naming the known names for anything else
    kind = "preset" if name in PRESETS else "model"
    hints = typing.get_type_hints(MODELS[preset.model].config_class)
    return Entry(name, kind, preset.description, hints)


def catalogue() -> list[tuple[str, str]]:
    """``(name, one-line description)`` of every model, preset and baseline, sorted by name."""
    return [(name, lookup(name).description) for name in names()]
