"""The model protocol every sequential recommender follows, and its dict-round-tripping configs.

Inputs are ``item_seq`` LongTensors (B, L), left-padded with 0, internal item ids 1..num_items
(BERT4Rec's mask token is ``num_items + 1``); L ≤ ``config.max_len``.

- ``objective`` says how the trainer makes targets: ``"causal"`` (every position predicts the
  next item; SASRec), ``"cloze"`` (masked positions predict themselves; BERT4Rec) or ``"last"``
  (only the last position has a target).
- ``forward(item_seq)`` → hidden states (B, L, D), zero at padding. With ``return_attention`` or
  ``return_layer_inputs`` it returns an ``EncoderOutput(hidden, attention, layer_inputs)``:
  per layer the (B, H, L, L) attention weights from the explicit-matmul reference path, and the
  ``AttentionInput(query, key)`` tensors the layer's attention consumed (normalised queries;
  keys/values). ``attention_modules()`` lists each layer's ``MultiHeadAttention`` (``q_proj``,
  ``k_proj``, ``v_proj``, ``out_proj``), so the lens can read W_Q, W_K, W_V, W_O.
- item logits are ``hidden @ output_embedding().T + output_bias()``; ``score_last`` returns them
  (B, num_items + 1) for the item after the last position, column 0 (padding) = −∞.
- ``extra_inputs`` names the keyword inputs beyond ``item_seq`` that ``forward`` and
  ``score_last`` take from the data: ``"users"`` (B,) internal user ids, ``"timestamps"`` (B, L)
  event times aligned with ``item_seq``. The trainer and the evaluator pass exactly these.
- A min–max model (AC-TSR) returns its attack parameters from ``attack_parameters()`` and
  defines ``adversarial_step``; the trainer then trains every other parameter on the loss and
  calls ``adversarial_step`` after each step.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import torch
from torch import nn

from attnsvm.rec.nn import losses
from attnsvm.rec.nn.attention import MultiHeadAttention
from attnsvm.rec.nn.blocks import NORM_LAYOUTS
from attnsvm.rec.nn.embedding import POSITION_KINDS, ItemEmbedding, SequenceEmbedding
from attnsvm.rec.nn.ffn import ACTIVATIONS

OBJECTIVES = ("causal", "cloze", "last")
INITS = ("normal", "xavier_attention", "xavier_normal")


@dataclass(frozen=True)
class Config:
    """A frozen dataclass that round-trips through plain dicts, with field-naming errors."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(
                f"unknown {cls.__name__} key {unknown[0]!r} (known keys: {', '.join(names)})"
            )
        hints = typing.get_type_hints(cls)
        for name, value in data.items():
            _check_type(cls.__name__, name, hints[name], value)
        return cls(**data)

    def replace(self, **overrides: Any) -> Self:
        return self.from_dict({**self.to_dict(), **overrides})

    def _choice(self, name: str, allowed: tuple[str, ...]) -> None:
        if getattr(self, name) not in allowed:
            raise ValueError(
                f"{type(self).__name__}.{name} must be one of {allowed}, "
                f"got {getattr(self, name)!r}"
            )

    def _range(self, name: str, low: float, high: float, *, high_open: bool = False) -> None:
        value = getattr(self, name)
        if not (low <= value < high if high_open else low <= value <= high):
            bracket = ")" if high_open else "]"
            raise ValueError(
                f"{type(self).__name__}.{name} must lie in [{low}, {high}{bracket}, got {value}"
            )


def _check_type(owner: str, name: str, hint: Any, value: Any) -> None:
    allowed = typing.get_args(hint) or (hint,)
    if float in allowed:
        allowed = (*allowed, int)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        names = " | ".join("None" if a is type(None) else a.__name__ for a in allowed)
        raise ValueError(f"{owner}.{name} must be {names}, got {type(value).__name__} {value!r}")


@dataclass(frozen=True)
class TransformerConfig(Config):
    """Fields shared by the transformer recommenders; each model sets its own defaults."""

    hidden_size: int = 64
    num_blocks: int = 2
    num_heads: int = 1
    ffn_size: int = 64  # 0: no FFN (blocks of attention only), where ``ffn_optional``
    dropout: float = 0.1
    attention_dropout: float = 0.1
    max_len: int = 200
    norm: str = "sasrec"  # "pre" | "post" | "sasrec" (see attnsvm.rec.nn.blocks)
    activation: str = "relu"  # "relu" | "gelu" | "swish"
    position: str = "learned"  # "learned" (from the right) | "learned_from_start" | "none"
    scale_embeddings: bool = True  # multiply item embeddings by √hidden_size (official SASRec)
    separate_output_embedding: bool = False
    #: dropout on the item table itself, drawn once per forward and shared by the input items
    #: and the scored ones (RecTools' item network); 0 in the official SASRec codes
    item_dropout: float = 0.0
    init_std: float = 0.02
    #: "normal": Normal(0, init_std) for every linear and embedding weight; "xavier_attention":
    #: the same but Glorot-uniform Q/K/V projections, as the official TF SASRec's dense layers
    #: and torch's MultiheadAttention in the pmixer / K&V ports (each projection ~4-6x larger at
    #: d = 64, so the attention logits start ~20-40x larger); "xavier_normal": Glorot-normal for
    #: every matrix, RecTools' init (init_std unused)
    init: str = "normal"
    #: the model's blocks can leave the FFN out (``ffn_size = 0``): those of ``TransformerEncoder``
    ffn_optional: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_blocks", "num_heads", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"{type(self).__name__}.{name} must be ≥ 1, got {getattr(self, name)}"
                )
        smallest = 0 if self.ffn_optional else 1
        if self.ffn_size < smallest:
            raise ValueError(
                f"{type(self).__name__}.ffn_size must be ≥ {smallest}"
                f"{' (0: no FFN)' if self.ffn_optional else ''}, got {self.ffn_size}"
            )
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"{type(self).__name__}.hidden_size {self.hidden_size} is not divisible by "
                f"num_heads {self.num_heads}"
            )
        self._range("dropout", 0.0, 1.0, high_open=True)
        self._range("attention_dropout", 0.0, 1.0, high_open=True)
        self._range("item_dropout", 0.0, 1.0, high_open=True)
        self._choice("norm", NORM_LAYOUTS)
        self._choice("activation", tuple(ACTIVATIONS))
        self._choice("position", POSITION_KINDS)
        self._choice("init", INITS)
        if self.init_std <= 0:
            raise ValueError(f"{type(self).__name__}.init_std must be > 0, got {self.init_std}")


LOSS_NAMES = ("bce", "sampled_softmax", "ce", "gbce")
SAMPLERS = ("uniform", "popularity")


@dataclass(frozen=True)
class LossConfig(Config):
    """Which loss the trainer optimises and how it samples negatives (``attnsvm.rec.nn.losses``).

    ``num_negatives`` is per target position for bce/gbce/sampled_softmax and unused by ``ce``;
    ``logq_correction`` applies to sampled_softmax; ``ce_chunk_size`` rows of logits at a time for
    ``ce`` (None: all at once). ``negatives_avoid_row`` keeps every item of a training row (its
    window's inputs and targets) out of that row's negatives, as Klenitskiy & Vasilev's sampler
    does (SASRec's avoids the user's whole training sequence, the same for windows that hold all
    of it); by default only the positive itself is avoided.
    """

    name: str = "ce"
    num_negatives: int = 1
    sampler: str = "uniform"
    logq_correction: bool = False
    gbce_t: float = 0.75
    # CE fwd + bwd of 13.5k rows × 3,417 items, 2 threads: 162–167 ms with 256–512-row chunks,
    # 188 ms with 1,024 (the chunk's logits then outgrow the caches)
    ce_chunk_size: int | None = 512
    negatives_avoid_row: bool = False

    def __post_init__(self) -> None:
        self._choice("name", LOSS_NAMES)
        self._choice("sampler", SAMPLERS)
        if self.num_negatives < 1:
            raise ValueError(f"LossConfig.num_negatives must be ≥ 1, got {self.num_negatives}")
        self._range("gbce_t", 0.0, 1.0)
        if self.ce_chunk_size is not None and self.ce_chunk_size < 1:
            raise ValueError(
                f"LossConfig.ce_chunk_size must be ≥ 1 or None, got {self.ce_chunk_size}"
            )

    @property
    def sampled(self) -> bool:
        return self.name != "ce"

    def compute(
        self,
        hidden: torch.Tensor,
        positives: torch.Tensor,
        embedding: torch.Tensor,
        bias: torch.Tensor | None = None,
        negatives: torch.Tensor | None = None,
        log_q: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """This loss on gathered positions; ``log_q`` (items + 1,) is used iff logq_correction."""
        if self.name == "ce":
            return losses.full_ce_loss(hidden, positives, embedding, bias, self.ce_chunk_size)
        if negatives is None:
            raise ValueError(f"loss {self.name!r} needs sampled negatives")
        if self.name == "bce":
            return losses.bce_loss(hidden, positives, embedding, negatives, bias)
        if self.name == "gbce":
            return losses.gbce_loss(hidden, positives, embedding, negatives, self.gbce_t, bias)
        if self.logq_correction and log_q is None:
            raise ValueError("logq_correction needs log_q, the sampler's log-probabilities")
        return losses.sampled_softmax_loss(
            hidden, positives, embedding, negatives, bias, log_q if self.logq_correction else None
        )


class SequentialRecommender(nn.Module):
    """Subclasses set ``objective``, ``config_class`` and ``self.items``, and define forward."""

    objective: ClassVar[str]
    config_class: ClassVar[type[TransformerConfig]]
    extra_inputs: ClassVar[tuple[str, ...]] = ()
    #: True if outputs at real positions do not depend on how much left padding precedes them
    #: (padding keys masked, positions counted from the right): scoring may then drop it
    padding_free: ClassVar[bool] = False
    items: ItemEmbedding

    def __init__(self, num_items: int, config: TransformerConfig) -> None:
        super().__init__()
        if num_items < 2:
            raise ValueError(f"num_items must be ≥ 2, got {num_items}")
        if self.objective not in OBJECTIVES:
            raise TypeError(f"{type(self).__name__}.objective must be one of {OBJECTIVES}")
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}")
        self.num_items = num_items
        self.config = config

    def build_embeddings(self, *, layer_norm: bool) -> None:
        """Set ``self.items`` (item table) and ``self.embed`` (input embedding) from the config."""
        config = self.config
        self.items = ItemEmbedding(
            self.num_items,
            config.hidden_size,
            separate_output=config.separate_output_embedding,
            table_dropout=config.item_dropout,
        )
        self.embed = SequenceEmbedding(
            self.items,
            config.max_len,
            config.position,
            scale=config.scale_embeddings,
            layer_norm=layer_norm,
            dropout=config.dropout,
        )

    def init_weights(self) -> None:
        """Linear and embedding weights as ``config.init`` says, zero biases and padding rows.

        ``xavier_attention`` re-draws the Q/K/V weights after the Normal pass rather than
        skipping them in it: the random stream, and so every recorded run, stays the same."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                if self.config.init == "xavier_normal":
                    nn.init.xavier_normal_(module.weight)
                else:
                    nn.init.normal_(module.weight, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        if self.config.init == "xavier_attention":
            for attention in self.attention_modules():
                for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
                    nn.init.xavier_uniform_(projection.weight)

    def check_input(self, item_seq: torch.Tensor) -> None:
        if item_seq.ndim != 2 or item_seq.dtype != torch.long:
            raise ValueError(
                f"item_seq must be a 2-D LongTensor (B, L), got {item_seq.dtype} "
                f"{tuple(item_seq.shape)}"
            )
        if item_seq.shape[1] > self.config.max_len:
            raise ValueError(
                f"item_seq has length {item_seq.shape[1]} > max_len {self.config.max_len}"
            )

    def output_embedding(self) -> torch.Tensor:
        return self.items.output_weight()

    def output_bias(self) -> torch.Tensor | None:
        return self.items.bias

    def scoring_input(self, item_seq: torch.Tensor) -> torch.Tensor:
        """The sequence whose last position predicts the next item (identity for causal models)."""
        return item_seq

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden (…, D)`` → item logits (…, num_items + 1), padding column −∞."""
        scores = hidden @ self.output_embedding().T
        bias = self.output_bias()
        if bias is not None:
            scores = scores + bias
        scores[..., 0] = float("-inf")
        return scores

    def score_last(self, item_seq: torch.Tensor) -> torch.Tensor:
        self.check_input(item_seq)
        if item_seq.numel() and (item_seq.min() < 0 or item_seq.max() > self.num_items):
            raise ValueError(f"item ids must lie in 0..{self.num_items} (0 = padding)")
        return self.logits(self.last_hidden(self.scoring_input(item_seq)))

    def last_hidden(self, item_seq: torch.Tensor) -> torch.Tensor:
        """``(B, D)`` hidden state of the last position (a model may compute only that one)."""
        return self(item_seq)[:, -1]

    def attention_weights(self, item_seq: torch.Tensor) -> list[torch.Tensor]:
        """Per layer (B, H, L, L) attention weights, from the explicit-matmul reference path."""
        return self(item_seq, return_attention=True).attention

    def attack_parameters(self) -> list[nn.Parameter]:
        """Parameters trained adversarially (by ``adversarial_step``), none by default."""
        return []

    def attention_modules(self) -> list[MultiHeadAttention]:
        return [m for m in self.modules() if isinstance(m, MultiHeadAttention)]
