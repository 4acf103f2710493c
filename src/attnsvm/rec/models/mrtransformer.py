"""MrTransformer (Ma et al., TOIS 41(3) 2023, "preference editing"): preference tokens, their
coverage, and pre-training that swaps the common preferences of two similar sequences.

**Encoder.** K learned preference tokens ``[P_1 … P_K]`` precede the items; a post-LN BERT stack
(GELU, learned positions counted from the first token, LayerNorm on the embeddings) where a
preference token attends every token and an item token attends the items only (bidirectional).
An identification attention then lets each ``P_k`` attend itself and the items: its output
``p_k`` is the k-th preference, and ``a_k`` (the head-mean weights on the items) where it looks.
The next item is scored from ``h = LN(GELU(W Σ_k p_k))`` against the tied item table plus an
output bias; ``forward`` returns the item tokens' states with ``h`` at the last position (the
one the trainer and the evaluator read). Objective: every prefix predicts its next item.

**Auxiliary terms.**

- ``coverage`` (weight ``coverage_weight``; fine-tuning): ``Σ_k Σ_i min(a_{k,i}, Σ_{k'<k}
  a_{k',i})``, per sequence, batch mean (See et al.'s coverage loss over the K tokens: a token
  pays for looking where earlier tokens looked already).
- ``swap`` (weight ``swap_weight``; pre-training, with ``loss.scale = 0`` as the official
  pre-training trains on this term alone): for a sequence x and a neighbouring sequence y (the
  ``partner`` training stream: one of each prefix's ``pair_neighbours`` nearest prefixes by the
  L2 distance of their item sets, ``attnsvm.rec.data.pairs``), with ``M_kl = wᵀ[p^x_k; p^y_l;
  p^x_k ⊙ p^y_l]``: ``C_y = softmax_row(M) P_y``, ``U_y = (1 − softmax_row(M)) P_y``, ``C_x =
  softmax_col(M)ᵀ P_x``, ``U_x = (1 − softmax_col(M))ᵀ P_x``; the swap ``P̃_x = W_x[C_y; U_x;
  C_y ⊙ U_x]``, ``P̃_y = W_y[C_x; U_y; C_x ⊙ U_y]``; the term ``common_weight · [MSE(C_x, C_y)
  + MSE(P̃_x, P_x) + MSE(P̃_y, P_y)] + swap_prediction_weight · [CE(dec(ΣP̃_x), y_x) +
  CE(dec(ΣP̃_y), y_y)]`` (10 and 0.1 officially).

**What is whose.** The official code (mamuyang/MrTransformer) could be read only in part: its
data generation (prefix instances from sliding windows of 50, step 5; each paired with its 20
nearest instances by exact L2 on multi-hot item sets, the instance itself included) and its run
scripts (pre-training on ``loss_ssl`` only, lr 3e-4, batch 512, 6,000 warm-up steps). The model
file (``modeling_coverage_learning_loss.py``) is not in the stored repository: the encoder mask,
identification layer, coverage loss, swap formulas and their weights above follow the project's
research notes, which read it; the paper could not be read in full. Our readings, with switches:

- ``coverage_from``: ``"preferences"`` (default) the coverage of token k counts the tokens
  before it, in token order (the notes' formula); ``"all"`` counts every other token (a
  symmetric overlap penalty).
- Which preferences the swap reads: ``p_k`` after the identification layer (the notes say
  "P_x = [p_1..p_K]").
- Fine-tuning the official way adds the partner's own CE and coverage (``CE_x + L_cov,x + CE_y +
  L_cov,y``); pairs change nothing there, so fine-tuning here trains on single prefixes.

**Cost** (issue 33). The model is padding-free (positions count from the first token, padding is
never attended), and in training it encodes its rows, and the swap its partners, in groups of
similar length each cut to its longest row (``row_groups``): every-prefix batches are mostly
short rows, and the whole window was mostly padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.models.row_groups import groups_by_length, in_row_order, scatter_rows
from attnsvm.rec.nn.attention import attention_modules, reference_attention
from attnsvm.rec.nn.embedding import ItemEmbedding, SequenceEmbedding
from attnsvm.rec.nn.losses import full_ce_loss

#: a group's fixed cost in positions' worth of work (``row_groups``): at d = 64 a position is
#: cheap, and a group's kernel calls cost about what 200 positions do (pre-training steps on
#: S3-Beauty: 50 and 600 were slower)
GROUP_OVERHEAD = 200.0


@dataclass(frozen=True)
class MrTransformerConfig(TransformerConfig):
    """The official Beauty settings (``bert_config_beauty_64_p3.json``) by default."""

    hidden_size: int = 64
    num_blocks: int = 2
    num_heads: int = 2
    ffn_size: int = 256
    dropout: float = 0.5
    attention_dropout: float = 0.2
    max_len: int = 50
    norm: str = "post"
    activation: str = "gelu"
    position: str = "learned_from_start"
    scale_embeddings: bool = False
    preference_tokens: int = 3  # K
    coverage_weight: float = 0.0
    coverage_from: str = "preferences"  # "preferences" | "all"
    swap_weight: float = 0.0
    common_weight: float = 10.0
    swap_prediction_weight: float = 0.1
    pair_neighbours: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.preference_tokens < 1 or self.pair_neighbours < 1:
            raise ValueError(
                "MrTransformerConfig.preference_tokens and pair_neighbours must be ≥ 1, got "
                f"{self.preference_tokens} and {self.pair_neighbours}"
            )
        for name in ("coverage_weight", "swap_weight", "common_weight", "swap_prediction_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"MrTransformerConfig.{name} must be ≥ 0")
        self._choice("coverage_from", ("preferences", "all"))
        if self.position != "learned_from_start":
            raise ValueError(
                "MrTransformerConfig.position must be 'learned_from_start': the preference "
                "tokens hold the first positions, as in the official right-padded input"
            )


class PreferenceIdentification(nn.Module):
    """Each preference token attends itself and the items; returns ``(p (B, K, D), a (B, K,
    L))``, ``a`` the head-mean attention on the items. Written out (not a ``MultiHeadAttention``)
    because its weights are part of the loss, and the lens reads the encoder's layers only."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.q_proj, self.k_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.v_proj, self.out_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def forward(
        self, preferences: torch.Tensor, items: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        count = preferences.shape[1]
        keys = torch.cat([preferences, items], dim=1)
        own = torch.eye(count, dtype=torch.bool, device=valid.device).expand(len(valid), -1, -1)
        keep = torch.cat([own, valid[:, None, :].expand(-1, count, -1)], dim=2)[:, None]
        q = self._split(self.q_proj(preferences))
        k, v = self._split(self.k_proj(keys)), self._split(self.v_proj(keys))
        dropout = self.dropout if self.training else 0.0
        out, weights = reference_attention(q, k, v, keep, dropout)
        out = self.out_proj(out.transpose(1, 2).flatten(2))
        return out, weights.mean(1)[..., count:]


def coverage_loss(attention: torch.Tensor, earlier_only: bool = True) -> torch.Tensor:
    """``attention`` (B, K, L) → batch mean of ``Σ_k Σ_i min(a_{k,i}, c_{k,i})``, ``c_k`` the sum
    of the earlier tokens' attention (``earlier_only``) or of every other token's."""
    before = attention.cumsum(1) - attention
    covered = before if earlier_only else attention.sum(1, keepdim=True) - attention
    return torch.minimum(attention, covered).sum((1, 2)).mean()


def attention_overlap(attention: torch.Tensor) -> torch.Tensor:
    """(B,): ``Σ_{k<k'} Σ_i min(a_{k,i}, a_{k',i})``, how much the K tokens look at the same
    items."""
    count = attention.shape[1]
    first, second = torch.triu_indices(count, count, 1)
    return torch.minimum(attention[:, first], attention[:, second]).sum((1, 2))


class PreferenceSwap(nn.Module):
    """The separation of two sequences' preferences into common and unique parts, and the swap
    of the common parts (formulas in the module docstring)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.match = nn.Linear(3 * dim, 1, bias=False)
        self.rebuild_x, self.rebuild_y = nn.Linear(3 * dim, dim), nn.Linear(3 * dim, dim)

    def forward(self, p_x: torch.Tensor, p_y: torch.Tensor):
        """``(C_x, C_y, P̃_x, P̃_y)`` of preferences ``p_x``, ``p_y`` (B, K, D)."""
        w_x, w_y, w_xy = self.match.weight[0].chunk(3)
        scores = (
            (p_x @ w_x)[:, :, None]
            + (p_y @ w_y)[:, None, :]
            + torch.einsum("bkd,d,bld->bkl", p_x, w_xy, p_y)
        )
        rows, columns = scores.softmax(2), scores.softmax(1).transpose(1, 2)
        common_y, unique_y = rows @ p_y, (1 - rows) @ p_y
        common_x, unique_x = columns @ p_x, (1 - columns) @ p_x
        swapped_x = self.rebuild_x(torch.cat([common_y, unique_x, common_y * unique_x], -1))
        swapped_y = self.rebuild_y(torch.cat([common_x, unique_y, common_x * unique_y], -1))
        return common_x, common_y, swapped_x, swapped_y


class MrTransformer(SequentialRecommender):
    objective = "last"
    config_class = MrTransformerConfig
    # positions count from the first token and padding is never attended: the trainer and the
    # evaluator may cut the padding (tests/rec/zoo)
    padding_free = True

    def __init__(self, num_items: int, config: MrTransformerConfig | None = None) -> None:
        config = config or MrTransformerConfig()
        super().__init__(num_items, config)
        count, dim = config.preference_tokens, config.hidden_size
        self.items = ItemEmbedding(
            num_items, dim, num_special=count, output_bias=True, table_dropout=config.item_dropout
        )
        # positions from the first token: P_k at k, the j-th real item at K + j
        self.embed = SequenceEmbedding(
            self.items,
            config.max_len + count,
            config.position,
            layer_norm=True,
            dropout=config.dropout,
        )
        self.encoder = self.build_encoder(causal=False)
        self.identify = PreferenceIdentification(dim, config.num_heads, config.attention_dropout)
        self.readout = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.LayerNorm(dim))
        self.swap = PreferenceSwap(dim)
        self.register_buffer(
            "preference_ids", torch.arange(num_items + 1, num_items + 1 + count), persistent=False
        )
        # the last training forward's preferences and attention, for the auxiliary terms
        self._trace: tuple[torch.Tensor, torch.Tensor] | None = None
        self.init_weights()

    def attention_modules(self):
        return attention_modules(self.encoder)

    def encode(self, item_seq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(item states (B, L, D), preferences p (B, K, D), attention a (B, K, L))``."""
        self.check_input(item_seq)
        count = self.config.preference_tokens
        tokens = torch.cat([self.preference_ids.expand(len(item_seq), -1), item_seq], dim=1)
        real = tokens != 0
        is_item = real.clone()
        is_item[:, :count] = False
        # preference tokens attend every real token, item tokens the items only
        keep = torch.where(
            ~is_item[:, :, None], real[:, None, :], is_item[:, None, :] & is_item[:, :, None]
        )
        keep = (keep | torch.eye(tokens.shape[1], dtype=torch.bool, device=tokens.device))[:, None]
        x = self.embed(tokens)
        for block in self.encoder.blocks:
            x = block(x, keep)
        items = x[:, count:] * is_item[:, count:, None].to(x.dtype)
        preferences, attention = self.identify(x[:, :count], items, is_item[:, count:])
        return items, preferences, attention

    def encode_in_groups(
        self, item_seq: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``encode``'s outputs, the rows encoded in groups of similar length, each cut to its
        longest row (``row_groups``; the model is padding-free, so the outputs are the same)."""
        groups = groups_by_length(item_seq != 0, GROUP_OVERHEAD)
        parts = [self.encode(item_seq[rows][:, -width:]) for rows, width in groups]
        length = item_seq.shape[1]
        items = scatter_rows(groups, [part[0] for part in parts], length)
        preferences = in_row_order(groups, [part[1] for part in parts])
        weights = [part[2].transpose(1, 2) for part in parts]
        attention = scatter_rows(groups, weights, length).transpose(1, 2)
        return items, preferences, attention

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        encode = self.encode_in_groups if self.training else self.encode
        items, preferences, attention = encode(item_seq)
        self._trace = (preferences, attention) if self.training else None
        last = self.readout(preferences.sum(1))
        return torch.cat([items[:, :-1], last[:, None]], dim=1)

    def auxiliary_weights(self) -> dict[str, float]:
        return {"coverage": self.config.coverage_weight, "swap": self.config.swap_weight}

    def auxiliary_streams(self) -> tuple[str, ...]:
        return ("source", "partner") if self.config.swap_weight else ()

    def auxiliary_losses(
        self, names: list[str], item_seq: torch.Tensor, hidden: torch.Tensor, **streams
    ) -> dict[str, torch.Tensor]:
        if self._trace is None:
            raise RuntimeError("MrTransformer's terms need the training forward of this batch")
        preferences, attention = self._trace
        terms = {}
        if "coverage" in names:
            earlier = self.config.coverage_from == "preferences"
            terms["coverage"] = coverage_loss(attention, earlier)
        if "swap" in names:
            terms["swap"] = self.swap_term(preferences, streams["source"], streams["partner"])
        return terms

    def _predict(self, preferences: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        hidden = self.readout(preferences.sum(1))
        return full_ce_loss(hidden, targets, self.output_embedding(), self.output_bias())

    def swap_term(
        self, p_x: torch.Tensor, source: torch.Tensor, partner: torch.Tensor
    ) -> torch.Tensor:
        """The pre-training loss of the module docstring for this batch's preferences ``p_x``;
        ``source``, ``partner`` (B, L + 1): this prefix and its partner, each with its target
        last."""
        config = self.config
        p_y = self.encode_in_groups(partner[:, :-1])[1]
        common_x, common_y, swapped_x, swapped_y = self.swap(p_x, p_y)
        common = (
            F.mse_loss(common_x, common_y) + F.mse_loss(swapped_x, p_x) + F.mse_loss(swapped_y, p_y)
        )
        prediction = self._predict(swapped_x, source[:, -1]) + self._predict(
            swapped_y, partner[:, -1]
        )
        return config.common_weight * common + config.swap_prediction_weight * prediction

    def preference_attention(self, item_seq: torch.Tensor) -> torch.Tensor:
        """(B, K, L): where each preference token looks (``a``), for analysis."""
        return self.encode(item_seq)[2]
