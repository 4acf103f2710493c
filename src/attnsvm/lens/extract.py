"""What one attention head of a trained recommender sees at the last position, in the paper's terms.

**Convention** (theory.md §1.1; the logits of sequence i are ``X_i W z_i``). Head ``h`` of an
``nn.Linear``-based attention computes ``q = Q_h z + b_q`` and ``k_t = K_h x_t + b_k``, with
``Q_h``, ``K_h`` the head's ``d_h`` rows of ``q_proj.weight`` and ``k_proj.weight`` (``nn.Linear``
stores ``(out, in)``), and the pre-softmax logit ``q·k_t / √d_h``. ``x_t`` are the keys' inputs
(the hidden states entering that attention, after its normalisation) and ``z`` is the query's
input at the last position. The biases give ``x_tᵀK_hᵀb_q`` (which depends on t) and constants.
To keep every term, inputs carry a constant 1: ``x̃ = [x; 1]``, ``z̃ = [z; 1]``, and

    logit_t = x̃_tᵀ W z̃,    W = K Qᵀ / √d_h,    K = [K_h  b_k]ᵀ,  Q = [Q_h  b_q]ᵀ  ∈ R^{(D+1)×d_h},

exactly (``W = W_K W_Qᵀ / √d_head``, rank ≤ d_h). The last row of ``W`` multiplies the keys'
constant coordinate, so it adds one number to every logit of a sequence: the softmax ignores it,
and no Att-SVM constraint sees it (key differences have a zero last coordinate).
``HeadView.W_selection`` is ``W`` with that row zeroed, the part that decides the attention and
the one compared with Att-SVM solutions.

Where a layer's keys are a per-row subset of the window (STRec keeps fewer tokens layer by
layer; ``AttentionInput.key_positions`` says which), the view is laid out on the whole window
all the same: a column outside the layer's key set counts as padding (zero ``X`` row,
``valid`` false), so positions mean the same history item in every layer.

Everything is computed in float64 on a float64 copy of the model.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch

from attnsvm.errors import ExpectedFailure
from attnsvm.rec.models import SequentialRecommender
from attnsvm.rec.nn.attention import record_attention


class LensError(ExpectedFailure, ValueError):
    """A run, model or request the lens cannot read (names what is missing)."""


@dataclass(frozen=True)
class HeadView:
    """One head at the last position of ``n`` left-padded windows of length ``L``."""

    layer: int
    head: int
    X: np.ndarray  # (n, L, D + 1) keys' inputs x̃ (zero rows at padding)
    Z: np.ndarray  # (n, D + 1) the last position's query input z̃
    valid: np.ndarray  # (n, L) bool: key positions holding an item (in the layer's key set)
    attention: np.ndarray  # (n, L) the model's attention of the last query (0 at padding)
    K: np.ndarray  # (D + 1, d_h) augmented key factor
    Q: np.ndarray  # (D + 1, d_h) augmented query factor

    @property
    def W(self) -> np.ndarray:
        """``K Qᵀ / √d_h``: ``X_i W z_i`` are the model's pre-softmax logits."""
        return self.K @ self.Q.T / math.sqrt(self.K.shape[1])

    @property
    def W_selection(self) -> np.ndarray:
        """``W`` without its softmax-invariant last row (the keys' constant coordinate)."""
        W = self.W.copy()
        W[-1] = 0.0
        return W

    def logits(self) -> np.ndarray:
        """``(n, L)`` pre-softmax logits ``x̃_tᵀ W z̃``, ``-inf`` at padding."""
        logits = np.einsum("ntp,np->nt", self.X, self.Z @ self.W.T)
        return np.where(self.valid, logits, -np.inf)

    def selected(self) -> np.ndarray:
        """The token each sequence attends to most (first position on ties)."""
        return np.argmax(np.where(self.valid, self.attention, -np.inf), axis=1)


def head_factors(q_weight, q_bias, k_weight, k_bias, head: int, num_heads: int):
    """Augmented ``(K, Q)``, each ``(D + 1, d_h)`` float64, of one head from projection tensors."""
    dim = q_weight.shape[0]
    if not 0 <= head < num_heads or dim % num_heads:
        raise LensError(f"head {head} does not exist (the layer has {num_heads} heads)")
    rows = slice(head * dim // num_heads, (head + 1) * dim // num_heads)

    def factor(weight, bias) -> np.ndarray:
        weight = torch.as_tensor(weight).detach().to(torch.float64).cpu()[rows]
        bias = (
            torch.zeros(weight.shape[0], dtype=torch.float64)
            if bias is None
            else (torch.as_tensor(bias).detach().to(torch.float64).cpu()[rows])
        )
        return torch.cat([weight, bias[:, None]], dim=1).T.numpy()

    return factor(k_weight, k_bias), factor(q_weight, q_bias)


def float64_copy(model: SequentialRecommender) -> SequentialRecommender:
    """A float64 copy of ``model`` in eval mode (the original is left as it is)."""
    return copy.deepcopy(model).to(torch.float64).eval()


def head_grid(model: SequentialRecommender, layer: int | None, head: int | None):
    """``[(layer, head), …]`` to analyse: all of them, or the requested ones (checked)."""
    if not model.attention_over_items:
        raise LensError(
            f"{type(model).__name__}'s attention runs over tokens that are not the history's "
            "items, so the lens cannot read it item by item"
        )
    modules = model.attention_modules()
    if not modules:
        raise LensError(f"{type(model).__name__} has no attention layers")
    if layer is not None and not 0 <= layer < len(modules):
        raise LensError(f"layer {layer} does not exist (the model has {len(modules)} layers)")
    layers = range(len(modules)) if layer is None else [layer]
    grid = []
    for i in layers:
        heads = modules[i].num_heads
        if head is not None and not 0 <= head < heads:
            raise LensError(f"head {head} does not exist (layer {i} has {heads} heads)")
        grid.extend((i, h) for h in (range(heads) if head is None else [head]))
    return grid


def extract(
    model64: SequentialRecommender,
    item_seq: torch.Tensor,
    grid,
    extras: dict[str, torch.Tensor] | None = None,
) -> list[HeadView]:
    """``HeadView`` of every ``(layer, head)`` in ``grid`` for the windows ``item_seq`` (n, L).

    ``model64`` is a float64 model (``float64_copy``); ``item_seq`` is what the model scores
    (``model.scoring_input`` of the left-padded histories); ``extras`` the model's extra inputs
    for those rows (SSE-PT's ``users``).
    """
    with torch.inference_mode(), record_attention(model64) as recorder:
        model64(item_seq, **(extras or {}))
    modules = model64.attention_modules()
    views = []
    for layer, head in grid:
        attention = modules[layer]
        inputs = recorder.layer_inputs[layer]
        keyed = key_columns(item_seq, inputs.key_positions).numpy()
        ones = torch.ones(*inputs.key.shape[:2], 1, dtype=torch.float64)
        X = on_window(torch.cat([inputs.key, ones], dim=-1), inputs.key_positions, item_seq)
        X = X.numpy() * keyed[..., None]
        Z = torch.cat([inputs.query[:, -1], ones[:, -1]], dim=-1).numpy()
        K, Q = head_factors(
            attention.q_proj.weight,
            attention.q_proj.bias,
            attention.k_proj.weight,
            attention.k_proj.bias,
            head,
            attention.num_heads,
        )
        weights = recorder.attention[layer][:, head, -1]
        weights = on_window(weights, inputs.key_positions, item_seq).numpy() * keyed
        views.append(HeadView(layer, head, X, Z, keyed, weights, K, Q))
    return views


def key_columns(item_seq: torch.Tensor, key_positions: torch.Tensor | None) -> torch.Tensor:
    """``(n, L)`` bool: window columns that hold an item and are among the layer's keys."""
    valid = item_seq != 0
    if key_positions is None:
        return valid
    return valid & torch.zeros_like(valid).scatter_(1, key_positions, True)


def on_window(
    values: torch.Tensor, key_positions: torch.Tensor | None, item_seq: torch.Tensor
) -> torch.Tensor:
    """Per-key ``values`` (n, k, …) laid out on the window's ``L`` columns (zero elsewhere)."""
    if key_positions is None:
        return values
    shape = (values.shape[0], item_seq.shape[1], *values.shape[2:])
    index = key_positions.reshape(*key_positions.shape, *[1] * (values.ndim - 2))
    return values.new_zeros(shape).scatter_(1, index.expand_as(values), values)
