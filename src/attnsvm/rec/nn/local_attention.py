"""Causal local (sliding-window) attention, computed in chunks so that no ``L × L`` tensor is built.

Query i attends the real items among keys ``j ∈ [i − w + 1, i]`` (``w = window``), and always
itself, so a padding row stays finite (as ``attention_mask`` does for full attention).

**Chunked path.** The window is cut, from the right, into chunks of ``w`` positions (the left
end padded with masked positions); the queries of a chunk attend the keys of that chunk and the
one before it, ``2w`` keys, under the band mask. That is every key a query may attend, so the
output is the masked full attention's, at ``O(L · w)`` time and memory instead of ``O(L²)``.

**Full path**, taken when recording attention weights for the lens (which reads ``(B, H, L, L)``),
when the queries are not the whole window (the last query only, at scoring time) and when the
window covers half the sequence or more (chunking would save nothing): ``MultiHeadAttention``
with the band as its keep-mask. With ``w ≥ L`` that mask is exactly ``attention_mask(valid,
causal=True)``, so the layer computes bit for bit what causal full attention computes.

The projections run on the unchunked ``(B, L, D)`` tensors, so hooks on ``v_proj`` and
``out_proj`` (the lens's forced-attention re-run) see the shapes of any ``MultiHeadAttention``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnsvm.rec.nn.attention import MultiHeadAttention, reference_attention


def local_keep_mask(valid: torch.Tensor, window: int, num_queries: int | None = None):
    """``(B, 1, L_q, L)`` bool keep-mask of causal local attention for ``valid`` (B, L) keys.

    The queries are the last ``num_queries`` positions (all of them by default): query i keeps
    key j iff j holds an item and ``0 ≤ i − j < window``, and always keeps itself."""
    length = valid.shape[1]
    count = length if num_queries is None else num_queries
    query = torch.arange(length - count, length, device=valid.device)[:, None]
    gap = query - torch.arange(length, device=valid.device)[None, :]
    band = (gap >= 0) & (gap < window)
    return (valid[:, None, None, :] & band) | (gap == 0)


def with_previous_chunk(chunks: torch.Tensor) -> torch.Tensor:
    """``(B, n, w, …)`` → ``(B, n, 2w, …)``: each chunk preceded by the one before it (zeros
    before the first)."""
    previous = torch.cat([torch.zeros_like(chunks[:, :1]), chunks[:, :-1]], dim=1)
    return torch.cat([previous, chunks], dim=2)


class LocalAttention(MultiHeadAttention):
    """``MultiHeadAttention`` restricted to a causal window of ``window`` keys (module docstring).

    ``keep_mask`` is the keys' validity ``(B, 1, 1, L)`` (a ``TransformerEncoder`` built with
    ``pair_mask = False`` passes it); the queries are the last ``L_q`` positions of the keys."""

    def __init__(self, dim: int, num_heads: int, window: int, dropout: float = 0.0) -> None:
        super().__init__(dim, num_heads, dropout)
        if window < 1:
            raise ValueError(f"the local attention window must be ≥ 1, got {window}")
        self.window = window

    def forward(
        self,
        query_input: torch.Tensor,
        key_input: torch.Tensor,
        keep_mask: torch.Tensor,
        **options,
    ) -> torch.Tensor:
        valid = keep_mask[:, 0, 0, :]
        num_queries, length = query_input.shape[1], key_input.shape[1]
        if self.record_weights or num_queries != length or 2 * self.window >= length:
            band = local_keep_mask(valid, self.window, num_queries)
            return super().forward(query_input, key_input, band, **options)
        if options:
            raise ValueError(f"the chunked local attention takes no {sorted(options)}")
        return self._chunked(query_input, key_input, valid)

    def _chunked(
        self, query_input: torch.Tensor, key_input: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        batch, length, dim = key_input.shape
        w = self.window
        chunks = -(-length // w)
        pad = chunks * w - length

        def chunked(x: torch.Tensor) -> torch.Tensor:  # (B, L, …) → (B, n, w, …), left-padded
            x = F.pad(x, (0, 0) * (x.ndim - 2) + (pad, 0))
            return x.reshape(batch, chunks, w, *x.shape[2:])

        q = self._heads(chunked(self.q_proj(query_input)).reshape(batch * chunks, w, dim))
        k, v = (
            self._heads(with_previous_chunk(chunked(p(key_input))).reshape(-1, 2 * w, dim))
            for p in (self.k_proj, self.v_proj)
        )
        key_valid = with_previous_chunk(chunked(valid))  # (B, n, 2w)
        offset = torch.arange(w, device=valid.device)[:, None] + w
        gap = offset - torch.arange(2 * w, device=valid.device)[None, :]
        keep = (key_valid[:, :, None, :] & (gap >= 0) & (gap < w)) | (gap == 0)
        keep = keep.reshape(batch * chunks, 1, w, 2 * w)
        dropout = self.dropout if self.training else 0.0
        if dropout > 0.0 and q.device.type == "cpu":  # as MultiHeadAttention: the faster mask
            out, _ = reference_attention(q, k, v, keep, dropout)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout)
        self._record(None, query_input, key_input, None)
        heads = out.transpose(1, 2).reshape(batch, chunks * w, dim)[:, pad:]
        return self.out_proj(heads)
