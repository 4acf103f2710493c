"""The model protocol every sequential recommender follows, and its dict-round-tripping configs.

Inputs are ``item_seq`` LongTensors (B, L), left-padded with 0, internal item ids 1..num_items
(BERT4Rec's mask token is ``num_items + 1``); L ≤ ``config.max_len``.

- ``objective`` says how the trainer makes targets: ``"causal"`` (every position predicts the
  next item; SASRec), ``"cloze"`` (masked positions predict themselves; BERT4Rec) or ``"last"``
  (only the last position has a target).
- ``forward(item_seq, **extras)`` → hidden states (B, L, D), zero at padding; nothing else, in
  training or not. What the attention saw is read beside the forward, not through it:
  ``with record_attention(model) as recorder: model(item_seq)`` (``attnsvm.rec.nn.attention``)
  switches every attention layer to its explicit-matmul reference path and records, per layer
  in ``attention_modules()`` order, the (B, H, L, L) attention weights (``recorder.attention``)
  and the ``AttentionInput(query, key)`` tensors the layer consumed (``recorder.layer_inputs``:
  normalised queries; keys/values). ``attention_modules()`` lists each layer's
  ``MultiHeadAttention`` (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), so the lens can
  read W_Q, W_K, W_V, W_O; ``attention_weights(item_seq)`` is the recorder's weights.
- item logits are ``hidden @ output_embedding().T + output_bias()``; ``score_last`` returns them
  (B, num_items + 1) for the item after the last position, column 0 (padding) = −∞.
- ``training_forward`` is what the trainer calls on a batch: ``forward``, or, where the objective
  is ``"last"``, ``trains_last_hidden`` says ``last_hidden`` computes the last position alone
  (its last layer one query, not L) and no auxiliary term reads the others, ``last_position``:
  the same function of the weights at the one position the loss reads.
- ``extra_inputs`` names the keyword inputs beyond ``item_seq`` (the ``**extras``) that
  ``forward``, ``last_hidden`` and ``score_last`` take from the data: ``"users"`` (B,) internal
  user ids, ``"timestamps"`` and ``"ratings"`` (B, L) aligned with ``item_seq``; ``extra_kwargs``
  picks them from what a batch has. The trainer and the evaluator pass exactly these.
- Auxiliary losses: ``auxiliary_weights()`` names the model's extra loss terms with their
  weights, ``auxiliary_losses`` computes them; the trainer adds ``weight · term`` (none by
  default). The training streams named in ``auxiliary_streams()`` (``attnsvm.rec.train.streams``)
  reach ``auxiliary_losses`` as keywords, in training only.
- A min–max model (AC-TSR) returns its attack parameters from ``attack_parameters()`` and
  defines ``adversarial_step``; the trainer then trains every other parameter on the loss and
  calls ``adversarial_step`` after each step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from attnsvm.rec.config_base import Config
from attnsvm.rec.nn.attention import MultiHeadAttention, attention_modules, record_attention
from attnsvm.rec.nn.blocks import NORM_LAYOUTS, TransformerBlock, TransformerEncoder
from attnsvm.rec.nn.embedding import POSITION_KINDS, ItemEmbedding, SequenceEmbedding
from attnsvm.rec.nn.ffn import ACTIVATIONS, PointwiseFFN

OBJECTIVES = ("causal", "cloze", "last")
INITS = ("normal", "xavier_attention", "xavier_normal")


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


class SequentialRecommender(nn.Module):
    """Subclasses set ``objective``, ``config_class`` and ``self.items``, and define forward."""

    objective: ClassVar[str]
    config_class: ClassVar[type[TransformerConfig]]
    extra_inputs: ClassVar[tuple[str, ...]] = ()
    #: True if outputs at real positions do not depend on how much left padding precedes them
    #: (padding keys masked, positions counted from the right): scoring may then drop it
    padding_free: ClassVar[bool] = False
    #: True if ``last_hidden`` computes the last position alone and equals ``forward(…)[:, -1]``
    #: as a function: objective "last" then trains through it (``training_forward``)
    trains_last_hidden: ClassVar[bool] = False
    #: False where the attention runs over tokens that are not the window's items (RLT4Rec
    #: interleaves rating and item tokens): the lens, which reads attention item by item, refuses
    attention_over_items: ClassVar[bool] = True
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

    def build_embeddings(self, *, layer_norm: bool, **item_options) -> None:
        """Set ``self.items`` (item table) and ``self.embed`` (input embedding) from the config;
        ``item_options`` go to the ``ItemEmbedding`` (BERT4Rec's mask token and output bias)."""
        config = self.config
        self.items = ItemEmbedding(
            self.num_items,
            config.hidden_size,
            separate_output=config.separate_output_embedding,
            table_dropout=config.item_dropout,
            **item_options,
        )
        self.embed = self.sequence_embedding(self.items, layer_norm=layer_norm)

    def sequence_embedding(self, table: nn.Module, *, layer_norm: bool) -> SequenceEmbedding:
        """The input embedding (items, positions, dropout) over ``table``: the item table, or a
        tower that builds item vectors from their features (SRT)."""
        config = self.config
        return SequenceEmbedding(
            table,
            config.max_len,
            config.position,
            scale=config.scale_embeddings,
            layer_norm=layer_norm,
            dropout=config.dropout,
        )

    def build_encoder(
        self,
        *,
        causal: bool,
        share_ffn: bool = False,
        attention: Callable[[], nn.Module] | None = None,
        pair_mask: bool = True,
        **options,
    ) -> TransformerEncoder:
        """``num_blocks`` ``TransformerBlock``s of the config's width, heads, FFN, dropouts and
        layout, as a ``TransformerEncoder``; ``options`` are further block switches (SASRec's
        ``attention_output_dropout``). ``share_ffn``: one FFN for the whole stack instead of one
        per block; ``attention`` builds each block's attention (default ``MultiHeadAttention``);
        ``pair_mask``: as ``TransformerEncoder`` takes it."""
        config = self.config
        blocks = [
            TransformerBlock(
                config.hidden_size,
                config.num_heads,
                0 if share_ffn else config.ffn_size,
                dropout=config.dropout,
                attention_dropout=config.attention_dropout,
                activation=config.activation,
                norm=config.norm,
                attention=None if attention is None else attention(),
                **options,
            )
            for _ in range(config.num_blocks)
        ]
        shared = None
        if share_ffn:
            if config.ffn_size < 1:
                raise ValueError(f"{type(config).__name__}: share_ffn needs ffn_size ≥ 1")
            shared = PointwiseFFN(
                config.hidden_size, config.ffn_size, config.activation, config.dropout
            )
        return TransformerEncoder(blocks, causal, shared_ffn=shared, pair_mask=pair_mask)

    def init_weights(self, root: nn.Module | None = None) -> None:
        """Linear and embedding weights as ``config.init`` says, zero biases and padding rows.

        ``xavier_attention`` re-draws the Q/K/V weights after the Normal pass rather than
        skipping them in it: the random stream, and so every recorded run, stays the same.
        ``root``: only that sub-module (a model that adds modules to a built backbone draws
        theirs after the backbone's, which stay what the backbone alone would draw)."""
        std = self.config.init_std
        for module in (self if root is None else root).modules():
            if isinstance(module, nn.Linear | nn.Embedding | nn.EmbeddingBag):
                if self.config.init == "xavier_normal":
                    nn.init.xavier_normal_(module.weight)
                else:
                    nn.init.normal_(module.weight, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if (
                isinstance(module, nn.Embedding | nn.EmbeddingBag)
                and module.padding_idx is not None
            ):
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        if self.config.init == "xavier_attention":
            attentions = self.attention_modules() if root is None else attention_modules(root)
            for attention in attentions:
                for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
                    nn.init.xavier_uniform_(projection.weight)

    def extra_kwargs(self, **available: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The keyword inputs ``extra_inputs`` names, picked from what a batch has (``users``,
        ``timestamps``, ``ratings``); one the data lacks is a clear error."""
        extras = {}
        for name in self.extra_inputs:
            value = available.get(name)
            if value is None:
                raise ValueError(f"{type(self).__name__} needs {name} and the data has none")
            extras[name] = value
        return extras

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

    def training_step(self) -> AbstractContextManager:
        """The context of one training step's forward and backward passes (all its length
        groups): a model whose item table is computed (SRT's feature tower) may compute it once
        in it instead of once a group; the others need nothing."""
        return nullcontext()

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

    def score_last(self, item_seq: torch.Tensor, **extras: torch.Tensor) -> torch.Tensor:
        self.check_input(item_seq)
        if item_seq.numel() and (item_seq.min() < 0 or item_seq.max() > self.num_items):
            raise ValueError(f"item ids must lie in 0..{self.num_items} (0 = padding)")
        return self.logits(self.last_hidden(self.scoring_input(item_seq), **extras))

    def last_hidden(self, item_seq: torch.Tensor, **extras: torch.Tensor) -> torch.Tensor:
        """``(B, D)`` hidden state of the last position (a model may compute only that one)."""
        return self(item_seq, **extras)[:, -1]

    def last_position(self, item_seq: torch.Tensor, **extras: torch.Tensor) -> torch.Tensor:
        """``(B, 1, D)``: ``last_hidden`` as a forward of the last position only."""
        return self.last_hidden(item_seq, **extras)[:, None]

    def training_forward(self, auxiliary_terms: Iterable[str]) -> Callable[..., torch.Tensor]:
        """The forward the trainer calls on a batch whose loss adds the model's own
        ``auxiliary_terms``: ``last_position`` where the objective reads the last position alone
        and ``last_hidden`` computes only it (``trains_last_hidden``) and no term reads more;
        else the model itself."""
        if self.objective == "last" and self.trains_last_hidden and not set(auxiliary_terms):
            return self.last_position
        return self

    def attention_weights(
        self, item_seq: torch.Tensor, **extras: torch.Tensor
    ) -> list[torch.Tensor]:
        """Per layer (B, H, L, L) attention weights, from the explicit-matmul reference path."""
        with record_attention(self) as recorder:
            self(item_seq, **extras)
        return recorder.attention

    def auxiliary_weights(self) -> dict[str, float]:
        """The model's named auxiliary loss terms and their weights (from its config); the
        trainer adds ``weight · term`` to the loss and never computes a term of weight 0."""
        return {}

    def auxiliary_streams(self) -> tuple[str, ...]:
        """The training streams (``attnsvm.rec.train.streams``) the active auxiliary terms read;
        the trainer passes each to ``auxiliary_losses`` as a keyword, none by default."""
        return ()

    def auxiliary_losses(
        self, names: list[str], item_seq: torch.Tensor, hidden: torch.Tensor, **extras
    ) -> dict[str, torch.Tensor]:
        """The unweighted terms ``names`` (scalars, batch means) for a training batch whose
        ``forward(item_seq, **extras)`` gave ``hidden``."""
        raise NotImplementedError(f"{type(self).__name__} defines no auxiliary loss {names}")

    def item_tables(self) -> list[str]:
        """Names of the state-dict entries whose row i belongs to item i (the item table's):
        ``train.init_from`` remaps exactly these by external id across catalogues. A model
        whose items are built from their features (SRT) has none."""
        # every path to the table: a module that holds it too (the input embedding) names it
        # again in the state dict
        return [
            f"{prefix}.{name}"
            for prefix, module in self.named_modules(remove_duplicate=False)
            if isinstance(module, ItemEmbedding)
            for name in module.state_dict()
        ]

    def attack_parameters(self) -> list[nn.Parameter]:
        """Parameters trained adversarially (by ``adversarial_step``), none by default."""
        return []

    def attention_modules(self) -> list[MultiHeadAttention]:
        return attention_modules(self)


class EncoderRecommender(SequentialRecommender):
    """A model that is ``self.encoder`` (a ``TransformerEncoder``) over ``self.embed``: SASRec
    and the models built like it; the last position alone is computed when only it is needed."""

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        self.check_input(item_seq)
        return self.encoder(self.embed(item_seq), item_seq != 0)

    def last_hidden(self, item_seq: torch.Tensor) -> torch.Tensor:
        self.check_input(item_seq)
        return self.encoder(self.embed(item_seq), item_seq != 0, last_query_only=True)[:, -1]
