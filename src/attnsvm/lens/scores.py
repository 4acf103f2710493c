"""Token scores of a trained recommender: how good each history item is for the true next item.

- **linear** (the paper's linear head, theory.md §2.1, for this architecture): the head's
  output for attention on token t alone, ``W_O,h (W_V,h x_it + b_V,h)`` (``W_O,h``: the head's
  columns of ``out_proj``), carried to the true next item's logit along the residual stream's
  *direct path*: every LayerNorm it passes through acts as its linear part at the model's own
  statistics, ``u ↦ diag(g) (I − 11ᵀ/D) u / σ`` (gain ``g``; ``σ`` the standard deviation of that
  LayerNorm's input at the last position in the model's own forward, held fixed), and the FFN
  branches and later attention layers are left out (their residual skip is the identity)::

      γ_it = e_targetᵀ N_k ⋯ N_1 W_O,h (W_V,h x_it + b_V,h),   N_j = diag(g_j) C / σ_ij.

  The norms on the path: ``"pre"`` the final LayerNorm; ``"sasrec"`` the layer's ``ffn_norm``,
  each later block's ``attention_norm`` and ``ffn_norm``, and the final one; ``"post"`` the
  layer's and each later block's ``attention_norm`` and ``ffn_norm``. This differs from the
  literal ``e_targetᵀ W_O W_V x_it`` exactly by those maps: the gains weight the coordinates
  unequally and the centring removes the output's mean, so the literal form reads a vector the
  model never sees. LayerNorm biases, ``b_O`` and the output bias add the same amount to every
  token of a sequence and are left out; the ``1/σ`` factors are positive per sequence, so they
  move no optimal token either, and are kept so that γ is in logit units. What a linear head
  cannot see is the FFNs: where a model maps a selected item to its prediction partly through
  them, the linear and the counterfactual optimal tokens part (on the planted data the linear
  one is the trigger in 54–69 % of sequences, the counterfactual one in 98–100 %); without FFNs
  (``ffn_size = 0``, the theory's linear head) the two agree (linear 95.5 %, counterfactual
  100 %). The first-order expansion in the attention weights at the model's own attention is no
  substitute: at a saturated selection its gradient points elsewhere (58 % there).
- **counterfactual** (the non-linear-head generalisation): the model's actual logit of the true
  next item when that head's attention at the last position is forced onto token t alone and
  the rest of the network runs as usual. In a causal model that changes only the last position,
  so the remaining layers are re-run for the last query alone, every candidate t in one batch:
  ``O(n L² D)`` per layer instead of ``L`` full forwards.

Every function takes the model's extra inputs (``extras``: SSE-PT's ``users``), one row per
window, so a personalised model is read as it scores its own users.

``forced_target_logits`` is the general form (any mixing of the head's values); the test checks
that the model's own attention as the mixing reproduces ``score_last``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from attnsvm.lens.extract import LensError, key_columns
from attnsvm.rec.models import SequentialRecommender
from attnsvm.rec.nn.attention import record_attention
from attnsvm.rec.nn.blocks import TransformerBlock, TransformerEncoder


def _target_embeddings(model64: SequentialRecommender, targets: torch.Tensor):
    bias = model64.output_bias()
    return model64.output_embedding()[targets], None if bias is None else bias[targets]


def _transformer_encoder(model64: SequentialRecommender) -> TransformerEncoder:
    encoder = getattr(model64, "encoder", None)
    if not isinstance(encoder, TransformerEncoder):
        raise LensError(
            f"linear token scores follow a TransformerEncoder's residual path; "
            f"{type(model64).__name__} has none (its counterfactual scores re-run the model)"
        )
    return encoder


def _encoder(model64: SequentialRecommender) -> TransformerEncoder:
    encoder = _transformer_encoder(model64)
    if not encoder.causal:
        raise LensError(
            f"counterfactual scores need a causal TransformerEncoder; {type(model64).__name__} "
            "has none (its last position is not the only one a forced attention changes)"
        )
    return encoder


def _rows(extras: dict[str, torch.Tensor] | None, rows) -> dict[str, torch.Tensor]:
    return {name: value[rows] for name, value in (extras or {}).items()}


def _block_inputs(model64: SequentialRecommender, item_seq: torch.Tensor, extras=None):
    """The residual stream entering every block, ``[(n, L, D), …]``."""
    captured: list[torch.Tensor] = []
    hooks = [
        block.register_forward_pre_hook(lambda _, args: captured.append(args[0]))
        for block in _encoder(model64).blocks
    ]
    try:
        with torch.inference_mode():
            model64(item_seq, **(extras or {}))
    finally:
        for hook in hooks:
            hook.remove()
    return captured


def _last_query_attention(
    block: TransformerBlock, query_in, prefix_keys, prefix_valid, last_keys, forced
):
    """Attention output of the last query, for C candidate last-position inputs at once.

    ``query_in``, ``last_keys`` (n, C, D); ``prefix_keys`` (n, P, D) shared by the candidates;
    ``forced = (head, mixing (n, C, P + 1))`` replaces that head's attention weights.
    """
    attention = block.attention
    n, C, D = query_in.shape
    H = attention.num_heads

    def split(x):
        return x.view(*x.shape[:2], H, D // H)

    q = split(attention.q_proj(query_in))
    k_prefix, v_prefix = split(attention.k_proj(prefix_keys)), split(attention.v_proj(prefix_keys))
    k_last, v_last = split(attention.k_proj(last_keys)), split(attention.v_proj(last_keys))
    scale = (D // H) ** 0.5
    logits_prefix = torch.einsum("nchd,nphd->nhcp", q, k_prefix) / scale
    logits_prefix = logits_prefix.masked_fill(~prefix_valid[:, None, None, :], float("-inf"))
    logit_last = torch.einsum("nchd,nchd->nhc", q, k_last)[..., None] / scale
    weights = torch.cat([logits_prefix, logit_last], dim=-1).softmax(dim=-1)  # (n, H, C, P+1)
    if forced is not None:
        head, mixing = forced
        weights = weights.clone()
        weights[:, head] = mixing
    out = torch.einsum("nhcp,nphd->nchd", weights[..., :-1], v_prefix)
    out = out + weights[..., -1].permute(0, 2, 1)[..., None] * v_last
    return attention.out_proj(out.reshape(n, C, D))


def _last_position_block(block: TransformerBlock, prefix, prefix_valid, last, forced=None):
    """The block's output at the last position (n, C, D), as ``TransformerBlock.forward``."""
    if block.norm == "pre":
        normed = block.attention_norm(last)
        attended = _last_query_attention(
            block, normed, block.attention_norm(prefix), prefix_valid, normed, forced
        )
        out = last + attended
        return out + block.feed_forward(block.ffn_norm(out))
    if block.norm == "post":
        attended = _last_query_attention(block, last, prefix, prefix_valid, last, forced)
        out = block.attention_norm(last + attended)
        return block.ffn_norm(out + block.feed_forward(out))
    query = block.attention_norm(last)
    attended = _last_query_attention(block, query, prefix, prefix_valid, last, forced)
    out = block.ffn_norm(query + attended)
    return out + block.feed_forward(out)


def _direct_path_norms(encoder: TransformerEncoder, layer: int) -> list[nn.LayerNorm]:
    """The LayerNorms between ``layer``'s attention output and the final hidden state, in order,
    on the residual stream's direct path (see the module docstring)."""
    blocks = encoder.blocks
    layout = blocks[layer].norm
    if layout == "pre":
        return [encoder.final_norm]
    later = [
        norm for block in blocks[layer + 1 :] for norm in (block.attention_norm, block.ffn_norm)
    ]
    if layout == "post":
        return [blocks[layer].attention_norm, blocks[layer].ffn_norm, *later]
    return [blocks[layer].ffn_norm, *later, encoder.final_norm]


def linear_scores(
    model64: SequentialRecommender,
    item_seq: torch.Tensor,
    targets: np.ndarray,
    layer: int,
    head: int,
    extras: dict[str, torch.Tensor] | None = None,
) -> np.ndarray:
    """``(n, L)`` linear scores γ of one head (NaN at padding); float64 model and windows."""
    encoder = _transformer_encoder(model64)
    norms = _direct_path_norms(encoder, layer)
    inputs: dict[int, torch.Tensor] = {}

    def keep_last_position(index: int):
        def hook(_, args) -> None:  # returning None leaves the LayerNorm's input as it is
            inputs[index] = args[0][:, -1]

        return hook

    hooks = [norm.register_forward_pre_hook(keep_last_position(i)) for i, norm in enumerate(norms)]
    try:
        with torch.inference_mode(), record_attention(model64, weights=False) as recorder:
            model64(item_seq, **(extras or {}))
        keys = recorder.layer_inputs[layer].key
    finally:
        for hook in hooks:
            hook.remove()
    attention = model64.attention_modules()[layer]
    dim, heads = attention.v_proj.weight.shape[0], attention.num_heads
    rows = slice(head * dim // heads, (head + 1) * dim // heads)
    with torch.inference_mode():
        readout, _ = _target_embeddings(model64, torch.as_tensor(targets))  # (n, D)
        for i in reversed(range(len(norms))):  # N_1ᵀ ⋯ N_kᵀ e_target, N_jᵀ = C diag(g_j) / σ
            sigma = torch.sqrt(inputs[i].var(dim=-1, unbiased=False) + norms[i].eps)
            readout = readout * norms[i].weight if norms[i].weight is not None else readout
            readout = (readout - readout.mean(dim=-1, keepdim=True)) / sigma[:, None]
        readout = readout @ attention.out_proj.weight[:, rows]  # (n, d_h)
        values = keys @ attention.v_proj.weight[rows].T
        if attention.v_proj.bias is not None:
            values = values + attention.v_proj.bias[rows]
        scores = torch.einsum("ntk,nk->nt", values, readout).numpy()
    return np.where((item_seq != 0).numpy(), scores, np.nan)


def forced_target_logits(
    model64: SequentialRecommender,
    item_seq: torch.Tensor,
    targets: np.ndarray,
    layer: int,
    head: int,
    mixing: torch.Tensor,
    extras: dict[str, torch.Tensor] | None = None,
) -> np.ndarray:
    """``(n, C)`` logits of ``targets`` when head ``head`` of layer ``layer`` mixes the values of
    the last query's keys with ``mixing (n, C, L)`` (rows of attention weights) instead of its own
    softmax; everything else runs as the model does (eval mode, float64)."""
    encoder = _encoder(model64)
    inputs = _block_inputs(model64, item_seq, extras)
    valid = item_seq != 0
    prefix_valid = valid[:, :-1]
    C = mixing.shape[1]
    embedding, bias = _target_embeddings(model64, torch.as_tensor(targets))
    with torch.inference_mode():
        last = inputs[layer][:, -1:].expand(-1, C, -1)
        for i in range(layer, len(encoder.blocks)):
            forced = (head, mixing) if i == layer else None
            last = _last_position_block(
                encoder.blocks[i], inputs[i][:, :-1], prefix_valid, last, forced
            )
        hidden = encoder.final_norm(last)
        logits = torch.einsum("ncd,nd->nc", hidden, embedding)
        if bias is not None:
            logits = logits + bias[:, None]
    return logits.numpy()


def counterfactual_scores(
    model64: SequentialRecommender,
    item_seq: torch.Tensor,
    targets: np.ndarray,
    layer: int,
    head: int,
    extras: dict[str, torch.Tensor] | None = None,
    chunk: int = 32,
) -> np.ndarray:
    """``(n, L)`` counterfactual scores (NaN at padding), in chunks of ``chunk`` sequences.

    A causal ``TransformerEncoder`` re-runs only the last position (``forced_target_logits``);
    any other model (a Fourier or convolution branch beside the attention, a Mamba block, a
    bidirectional encoder) re-runs whole (``forced_by_rerun``)."""
    encoder = getattr(model64, "encoder", None)
    if not (isinstance(encoder, TransformerEncoder) and encoder.causal):
        return forced_by_rerun(model64, item_seq, targets, layer, head, extras)
    n, L = item_seq.shape
    out = np.full((n, L), np.nan)
    one_hot = torch.eye(L, dtype=torch.float64)
    for start in range(0, n, chunk):
        rows = slice(start, min(start + chunk, n))
        block = item_seq[rows]
        mixing = one_hot.expand(block.shape[0], L, L)
        out[rows] = forced_target_logits(
            model64, block, targets[rows], layer, head, mixing, _rows(extras, rows)
        )
    valid = (item_seq != 0).numpy()
    return np.where(valid, out, np.nan)


def forced_by_rerun(
    model64: SequentialRecommender,
    item_seq: torch.Tensor,
    targets: np.ndarray,
    layer: int,
    head: int,
    extras: dict[str, torch.Tensor] | None = None,
    rows_per_forward: int = 1024,
) -> np.ndarray:
    """``(n, L)`` counterfactual scores of any model built on ``MultiHeadAttention``: the whole
    model runs once per candidate token t with the head's output at the last query replaced by
    token t's value (its attention on t alone; ``out_proj`` still mixes the heads), so whatever
    reads that output later (later layers, a non-causal Fourier filter, a gate) sees the change.
    Costs L forwards per sequence, batched ``rows_per_forward`` windows at a time. Where the
    layer's keys are a subset of the window (STRec), columns outside it are NaN, as padding."""
    attention = model64.attention_modules()[layer]
    width = attention.v_proj.weight.shape[0] // attention.num_heads
    columns = slice(head * width, (head + 1) * width)
    n, L = item_seq.shape
    with torch.inference_mode(), record_attention(model64, weights=False) as recorder:
        model64(item_seq, **(extras or {}))
    positions = recorder.layer_inputs[layer].key_positions
    keyed = key_columns(item_seq, positions).numpy()
    key_index = torch.arange(L).expand(n, L)  # window column → index among the layer's keys
    if positions is not None:  # a column outside the key set points at key 0; NaN at the end
        ranks = torch.arange(positions.shape[1]).expand_as(positions)
        key_index = torch.zeros((n, L), dtype=torch.long).scatter_(1, positions, ranks)
    per_forward = max(1, rows_per_forward // L)
    embedding, bias = _target_embeddings(model64, torch.as_tensor(targets))
    values: list[torch.Tensor] = []
    candidates = torch.empty(0, dtype=torch.long)

    def keep_values(_, __, output) -> None:
        values.append(output)

    def force_last_query(_, args):
        heads = args[0].clone()
        chosen = values.pop()[torch.arange(len(heads)), candidates]  # (B, D): value of t
        heads[:, -1, columns] = chosen[:, columns]
        return (heads, *args[1:])

    hooks = [
        attention.v_proj.register_forward_hook(keep_values),
        attention.out_proj.register_forward_pre_hook(force_last_query),
    ]
    scores = np.full((n, L), np.nan)
    try:
        with torch.inference_mode():
            for start in range(0, n, per_forward):
                rows = np.arange(start, min(start + per_forward, n))
                candidates = key_index[rows].reshape(-1)
                batch = {k: v.repeat_interleave(L, dim=0) for k, v in _rows(extras, rows).items()}
                hidden = model64(item_seq[rows].repeat_interleave(L, dim=0), **batch)[:, -1]
                logits = (hidden.view(len(rows), L, -1) * embedding[rows, None]).sum(-1)
                if bias is not None:
                    logits = logits + bias[rows, None]
                scores[rows] = logits.numpy()
    finally:
        for hook in hooks:
            hook.remove()
    return np.where(keyed, scores, np.nan)
