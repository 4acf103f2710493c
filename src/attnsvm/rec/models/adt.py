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

**Cost** (issue 33). In training with a layer term the batch runs in groups of rows of similar
length, each cut to its longest row (``row_groups``: SASRec is padding-free, so the states are
the same), and the encoder, the decoder and the terms see (nearly) real positions only while
every term stays a mean over the whole batch, the official one included. The decoder's
attention runs as the encoder's does (explicit with this package's dropout on a CPU in
training, SDPA otherwise) on the weights of its ``nn.MultiheadAttention`` modules, the memory's
keys and values of every layer come from one product, and each kind of term is one batched
expression over the layers that have it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.models.row_groups import groups_by_length, scatter_rows
from attnsvm.rec.models.sasrec import SASRec, SASRecConfig
from attnsvm.rec.nn.attention import attention_mask, reference_attention
from attnsvm.rec.nn.ffn import PointwiseFFN

#: a group's fixed cost in positions' worth of work (``row_groups``): at the official d = 256 a
#: group's few hundred kernel calls cost about what 60 positions do through the encoder and the
#: decoder, forward and backward (steps on S3-Beauty were alike from 40 to 160)
GROUP_OVERHEAD = 60.0


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


def _attend(
    module: nn.MultiheadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    keep: torch.Tensor,
) -> torch.Tensor:
    """``module``'s attention of per-head ``(B, H, L, d_h)`` projections under the keep-mask
    ``keep`` (B, 1, L, L), through its ``out_proj``: the encoder's paths (``MultiHeadAttention``),
    so dropout on a CPU draws this package's cheaper mask."""
    dropout = module.dropout if module.training else 0.0
    if dropout > 0.0 and query.device.type == "cpu":
        out = reference_attention(query, key, value, keep, dropout)[0]
    else:
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=keep, dropout_p=dropout)
    return module.out_proj(out.transpose(1, 2).flatten(2))


class DecoderLayer(nn.Module):
    """The official ``DecoderLayer``: attention sub-layers without residuals of their own. Its
    weights live in torch's ``nn.MultiheadAttention`` modules as there (so the lens, which reads
    the encoder's ``MultiHeadAttention`` layers, never sees the decoder, which does not run when
    scoring); ``forward`` computes with them directly (``_attend``)."""

    def __init__(self, config: ADTConfig) -> None:
        super().__init__()
        dim, heads, dropout = config.hidden_size, config.num_heads, config.attention_dropout
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.self_attention = nn.MultiheadAttention(dim, heads, dropout, batch_first=True)
        self.cross_attention = nn.MultiheadAttention(dim, heads, dropout, batch_first=True)
        self.ffn = PointwiseFFN(dim, config.ffn_size, config.activation, config.dropout)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def memory_projection(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The cross-attention's key and value weights ``(2D, D)`` and biases ``(2D,)``."""
        dim = self.norm.normalized_shape[0]
        attention = self.cross_attention
        return attention.in_proj_weight[dim:], attention.in_proj_bias[dim:]

    def forward(
        self,
        x: torch.Tensor,
        memory: tuple[torch.Tensor, torch.Tensor],
        keep: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """``memory``: per-head keys and values of the encoder's output (``memory_projection``);
        ``keep``: the keep-masks (B, 1, L, L) of the self-attention and the cross-attention."""
        dim = x.shape[-1]
        normed = self.norm(x)
        own = self.self_attention
        query, key, value = F.linear(normed, own.in_proj_weight, own.in_proj_bias).chunk(3, -1)
        heads = [self.split_heads(part) for part in (query, key, value)]
        attended = _attend(own, *heads, keep[0])
        cross = self.cross_attention
        query = F.linear(attended, cross.in_proj_weight[:dim], cross.in_proj_bias[:dim])
        attended = _attend(cross, self.split_heads(query), *memory, keep[1])
        return normed + attended + self.ffn(attended)


@dataclass
class GroupTrace:
    """One group of rows of a training forward: which rows, their cut windows, the encoder's
    output and what the hooks read (each block's input, each W_O's input)."""

    rows: torch.Tensor
    item_seq: torch.Tensor
    hidden: torch.Tensor
    inputs: list[torch.Tensor]
    heads: list[torch.Tensor]


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
        self._trace: list[GroupTrace] | None = None  # the last training forward's groups

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
        self.check_input(item_seq)
        groups = groups_by_length(item_seq != 0, GROUP_OVERHEAD)
        self._trace = []
        for rows, width in groups:
            window = item_seq[rows][:, -width:]
            with self._tracing() as trace:
                hidden = super().forward(window)
            self._trace.append(GroupTrace(rows, window, hidden, trace["inputs"], trace["heads"]))
        return scatter_rows(groups, [group.hidden for group in self._trace], item_seq.shape[1])

    def auxiliary_losses(
        self, names: list[str], item_seq: torch.Tensor, hidden: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        terms = {}
        if "embedding_norm" in names:
            terms["embedding_norm"] = self.items.input.weight.norm()
        layers = range(self.config.num_blocks)
        rebuilt = [layer for layer in layers if f"reconstruction_{layer + 1}" in names]
        identified = [layer for layer in layers if f"independence_{layer + 1}" in names]
        if not rebuilt and not identified:
            return terms
        if self._trace is None:
            raise RuntimeError("ADT's layer terms need the training forward of this batch first")
        sums = {"reconstruction": 0.0, "independence": 0.0}
        positions = 0
        for group in self._trace:
            valid = group.item_seq != 0
            positions += int(valid.sum())
            if rebuilt:
                decoded = self.decode(group.item_seq, group.hidden)
                # layer l's input against decoder layer L − 1 − l's output, every layer at once
                targets = torch.stack([group.inputs[layer] for layer in rebuilt])[:, valid]
                outputs = torch.stack([decoded[-1 - layer] for layer in rebuilt])[:, valid]
                sums["reconstruction"] += (targets - outputs).pow(2).mean(-1).sum(-1)
            if identified:
                heads = torch.stack([group.heads[layer] for layer in identified])[:, valid]
                sums["independence"] += self.head_nll(identified, heads).sum(-1)
        if self.config.aux_mean == "window":
            denominator = len(item_seq) * self.config.max_len
        else:
            denominator = max(positions, 1)
        for kind, chosen in (("reconstruction", rebuilt), ("independence", identified)):
            for index, layer in enumerate(chosen):
                terms[f"{kind}_{layer + 1}"] = sums[kind][index] / denominator
        return terms

    def head_nll(self, layers: list[int], heads: torch.Tensor) -> torch.Tensor:
        """(len(layers), N): per layer and position, the mean over heads of −log p(h | o_h)
        from the layer's classifier; ``heads`` (len(layers), N, D) the heads' outputs before
        W_O of those layers."""
        classifiers = [self.disentangling["head_classifiers"][layer] for layer in layers]
        weight = torch.stack([classifier.weight for classifier in classifiers])  # (., H, d/H)
        bias = torch.stack([classifier.bias for classifier in classifiers])
        outputs = heads.unflatten(-1, (self.config.num_heads, -1))  # (., N, H, d/H)
        logits = torch.einsum("lnhw,lcw->lnhc", outputs, weight) + bias[:, None, None, :]
        log_probs = logits.log_softmax(-1)
        return -log_probs.diagonal(dim1=-2, dim2=-1).mean(-1)

    def decode(self, item_seq: torch.Tensor, encoded: torch.Tensor) -> list[torch.Tensor]:
        """Each decoder layer's output (B, L, D), first layer first, for inputs shifted right
        by one and the encoder's output as memory (both attended causally)."""
        shifted = F.pad(item_seq[:, :-1], (1, 0))
        keep = tuple(attention_mask(keys != 0, causal=True) for keys in (shifted, item_seq))
        valid = (shifted != 0).unsqueeze(-1).to(encoded.dtype)
        layers = self.disentangling["decoder"]
        # every layer's memory keys and values in one product: they all read the same memory
        projections = [layer.memory_projection() for layer in layers]
        weight = torch.cat([w for w, _ in projections])
        bias = torch.cat([b for _, b in projections])
        memories = F.linear(encoded, weight, bias).chunk(2 * len(layers), -1)
        x = self.embed(shifted)
        outputs = []
        for index, layer in enumerate(layers):
            memory = tuple(layer.split_heads(part) for part in memories[2 * index : 2 * index + 2])
            x = layer(x, memory, keep) * valid
            outputs.append(x)
        return outputs
