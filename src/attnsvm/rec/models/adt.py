"""ADT (Adaptive Disentangled Transformer, KDD 2023): SASRec with two auxiliary losses per layer.

The backbone is SASRec, trained with its BCE. ADT adds, for every layer l (official code:
defineZYP/ADT ``sasrec/modules.py``, ``model.py``, ``main.py``, ``utils.py``):

- **Independence** (``independence_l``, weight λ2_l): each head's attention output before W_O,
  ``o_h ∈ ℝ^{d/H}`` at every position, goes through a per-layer classifier ``d/H → H``; the term
  is the NLL of its log-softmax against the head's own index h, a discriminative proxy for "the
  heads carry mutually independent information" (the paper's mutual-information constraint).
- **Reconstruction** (``reconstruction_l``, weight λ1_l): a decoder of L layers reads the item
  sequence shifted right by one (teacher forcing) and the encoder's final output; decoder layer
  j is ``d = LN(x); d = SelfAttn_causal(d); d = CrossAttn_causal(d, encoder output);
  x = LN(x) + d + FFN(d)``. The term is the MSE between the input of encoder layer l and the
  output of decoder layer ``L − 1 − l`` (the decoder's outputs, reversed, rebuild the encoder's
  inputs from the top down).
- ``embedding_norm`` (weight ``embedding_norm_weight``): ``‖E‖_F``, not squared, of the item
  table, the official ``weight_decay · torch.norm(item_emb)``.

λ1, λ2 are the official ``get_lambdas`` values in the presets ``adt-ml-1m`` and ``adt-beauty``
(its Beauty is ``amazon-beauty-bert4rec``); the λ-grid evolutionary search that found them is
not part of this model.

The paper itself could not be read in full: the mechanism above is the official code's, and
the parts where this port chooses are switches:

- ``independence_last_layer_weight``: the official ``main.py`` weights every layer's
  independence loss by ``lambdas2[i]``, ``i`` left over from the reconstruction loop (the last
  layer). Off by default (each layer its own λ2); on reproduces the official runs (on Beauty,
  whose last λ2 is 0, the independence terms are then off altogether).
- ``aux_mean``: the official means run over the whole ``maxlen`` window, padding included
  (``F.mse_loss`` over (B, maxlen, d), ``nll_loss`` over B·maxlen rows); ``"window"`` (default)
  divides the sums over real positions by that window size, ``"positions"`` by the number of real
  positions. The trainer weights length groups by their share of the batch's targets, so
  ``"window"`` is the official mean exactly when a batch is one group (``train.length_groups =
  1``). Padding positions themselves contribute nothing here: in the official code their head
  outputs are the value bias and their classifier term a constant.

With every weight 0 the model is SASRec: same parameters first in the same order (so the same
initial weights for a seed), same forward, and no auxiliary term computed.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.models.sasrec import SASRec, SASRecConfig
from attnsvm.rec.nn.attention import attention_mask
from attnsvm.rec.nn.ffn import PointwiseFFN


def layer_weights(text: str, layers: int, name: str) -> tuple[float, ...]:
    """``"0.1,0.06"`` → one weight per layer; a single value applies to every layer."""
    try:
        values = tuple(float(part) for part in text.split(",")) if text.strip() else (0.0,)
    except ValueError:
        raise ValueError(
            f"ADTConfig.{name} must be comma-separated numbers, got {text!r}"
        ) from None
    if len(values) == 1:
        values = values * layers
    if len(values) != layers or any(not v >= 0 for v in values):
        raise ValueError(
            f"ADTConfig.{name} needs one weight ≥ 0 per layer ({layers}) or a single one, "
            f"got {text!r}"
        )
    return values


@dataclass(frozen=True)
class ADTConfig(SASRecConfig):
    """SASRec's fields plus the per-layer weights (comma-separated, layer 1 first)."""

    reconstruction_weights: str = "0"  # λ1 per layer
    independence_weights: str = "0"  # λ2 per layer
    independence_last_layer_weight: bool = False  # the official main.py's weighting
    embedding_norm_weight: float = 0.0
    aux_mean: str = "window"  # "window" | "positions"

    def __post_init__(self) -> None:
        super().__post_init__()
        layer_weights(self.reconstruction_weights, self.num_blocks, "reconstruction_weights")
        layer_weights(self.independence_weights, self.num_blocks, "independence_weights")
        if self.embedding_norm_weight < 0:
            raise ValueError(
                f"ADTConfig.embedding_norm_weight must be ≥ 0, got {self.embedding_norm_weight}"
            )
        self._choice("aux_mean", ("window", "positions"))


class DecoderLayer(nn.Module):
    """The official ``DecoderLayer``: attention sub-layers without residuals of their own, on
    torch's ``nn.MultiheadAttention`` as there (so the lens, which reads the encoder's
    ``MultiHeadAttention`` layers, never sees the decoder, which does not run when scoring)."""

    def __init__(self, config: ADTConfig) -> None:
        super().__init__()
        dim, heads, dropout = config.hidden_size, config.num_heads, config.attention_dropout
        self.norm = nn.LayerNorm(dim)
        self.self_attention = nn.MultiheadAttention(dim, heads, dropout, batch_first=True)
        self.cross_attention = nn.MultiheadAttention(dim, heads, dropout, batch_first=True)
        self.ffn = PointwiseFFN(dim, config.ffn_size, config.activation, config.dropout)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, blocked: tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        """``blocked``: torch's boolean masks (True = not attended), (B·H, L, L), for the
        self-attention and for the cross-attention to ``memory``."""
        normed = self.norm(x)
        attended = self.self_attention(
            normed, normed, normed, attn_mask=blocked[0], need_weights=False
        )[0]
        attended = self.cross_attention(
            attended, memory, memory, attn_mask=blocked[1], need_weights=False
        )[0]
        return normed + attended + self.ffn(attended)


class ADT(SASRec):
    config_class = ADTConfig

    def __init__(self, num_items: int, config: ADTConfig | None = None) -> None:
        config = config or ADTConfig()
        super().__init__(num_items, config)  # the backbone, initialised exactly as SASRec's
        heads, width = config.num_heads, config.hidden_size // config.num_heads
        self.disentangling = nn.ModuleDict(
            {
                "head_classifiers": nn.ModuleList(
                    nn.Linear(width, heads) for _ in range(config.num_blocks)
                ),
                "decoder": nn.ModuleList(DecoderLayer(config) for _ in range(config.num_blocks)),
            }
        )
        self.init_weights(self.disentangling)
        self.reconstruction = layer_weights(
            config.reconstruction_weights, config.num_blocks, "reconstruction_weights"
        )
        independence = layer_weights(
            config.independence_weights, config.num_blocks, "independence_weights"
        )
        if config.independence_last_layer_weight:
            independence = (independence[-1],) * config.num_blocks
        self.independence = independence
        self._trace: dict[str, list[torch.Tensor]] | None = None  # the last training forward's

    def auxiliary_weights(self) -> dict[str, float]:
        weights = {"embedding_norm": self.config.embedding_norm_weight}
        for layer in range(self.config.num_blocks):
            weights[f"reconstruction_{layer + 1}"] = self.reconstruction[layer]
            weights[f"independence_{layer + 1}"] = self.independence[layer]
        return weights

    def _traced(self) -> bool:
        """Record layer inputs and head outputs in this forward: training with a layer term."""
        return self.training and any(w != 0 for w in (*self.reconstruction, *self.independence))

    @contextmanager
    def _tracing(self):
        """Forward pre-hooks on every block (its input) and every W_O (the heads' outputs)."""
        trace: dict[str, list[torch.Tensor]] = {"inputs": [], "heads": []}
        hooks = [
            block.register_forward_pre_hook(lambda _, args: trace["inputs"].append(args[0]))
            for block in self.encoder.blocks
        ] + [
            block.attention.out_proj.register_forward_pre_hook(
                lambda _, args: trace["heads"].append(args[0])
            )
            for block in self.encoder.blocks
        ]
        try:
            yield trace
        finally:
            for hook in hooks:
                hook.remove()

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        if not self._traced():
            self._trace = None
            return super().forward(item_seq)
        with self._tracing() as trace:
            hidden = super().forward(item_seq)
        self._trace = trace
        return hidden

    def auxiliary_losses(
        self, names: list[str], item_seq: torch.Tensor, hidden: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        terms = {}
        if "embedding_norm" in names:
            terms["embedding_norm"] = self.items.input.weight.norm()
        layer_terms = [n for n in names if n != "embedding_norm"]
        if not layer_terms:
            return terms
        if self._trace is None:
            raise RuntimeError("ADT's layer terms need the training forward of this batch first")
        valid = (item_seq != 0).to(hidden.dtype)
        trace = self._trace
        decoded = self.decode(item_seq, hidden) if any("recon" in n for n in names) else None
        for layer in range(self.config.num_blocks):
            name = f"reconstruction_{layer + 1}"
            if name in names:
                error = (trace["inputs"][layer] - decoded[-1 - layer]).pow(2).mean(-1)
                terms[name] = self._mean(error, valid)
            name = f"independence_{layer + 1}"
            if name in names:
                terms[name] = self._mean(self.head_nll(layer, trace["heads"][layer]), valid)
        return terms

    def _mean(self, values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``values`` (B, L) summed over real positions, divided by the window or their count."""
        total = (values * valid).sum()
        if self.config.aux_mean == "window":
            return total / (values.shape[0] * self.config.max_len)
        return total / valid.sum().clamp(min=1)

    def head_nll(self, layer: int, heads: torch.Tensor) -> torch.Tensor:
        """(B, L): mean over heads of −log p(h | o_h) from layer ``layer``'s classifier."""
        batch, length, _ = heads.shape
        count = self.config.num_heads
        outputs = heads.view(batch, length, count, -1)
        log_probs = self.disentangling["head_classifiers"][layer](outputs).log_softmax(-1)
        return -log_probs.diagonal(dim1=-2, dim2=-1).mean(-1)

    def decode(self, item_seq: torch.Tensor, encoded: torch.Tensor) -> list[torch.Tensor]:
        """Each decoder layer's output (B, L, D), first layer first, for inputs shifted right
        by one and the encoder's output as memory (both attended causally)."""
        shifted = F.pad(item_seq[:, :-1], (1, 0))
        heads = self.config.num_heads
        blocked = tuple(
            (~attention_mask(keys != 0, causal=True)).expand(-1, heads, -1, -1).flatten(0, 1)
            for keys in (shifted, item_seq)
        )
        valid = (shifted != 0).unsqueeze(-1).to(encoded.dtype)
        x = self.embed(shifted)
        outputs = []
        for layer in self.disentangling["decoder"]:
            x = layer(x, encoded, blocked) * valid
            outputs.append(x)
        return outputs
