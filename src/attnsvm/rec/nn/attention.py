"""Multi-head attention on ``scaled_dot_product_attention``, with an explicit-matmul reference path
and a recorder that reads what each layer attended.

Per head h, with ``d_h = dim / heads``:

    A_h = softmax(Q_h K_hᵀ / √d_h  masked where keep_mask is False),   out = [A_1 V_1 … A_H V_H] W_O

``Q = x_q W_Qᵀ + b_Q``, ``K = x_k W_Kᵀ + b_K``, ``V = x_k W_Vᵀ + b_V`` are ``q_proj``, ``k_proj``,
``v_proj`` and ``out_proj`` (``nn.Linear``), so the lens reads ``W_Q = q_proj.weight`` etc. The
fast path is SDPA; the reference path (``reference_attention``) computes the same thing with
explicit matmuls and also gives ``A`` (before attention dropout), shape ``(B, H, L_q, L_k)``.

Two per-pair terms, both optional and broadcast to ``(B, H, L_q, L_k)``: an additive ``bias``
on the logits before the softmax (a time-interval or relative-position bias), and a
``value_gain`` G that scales what key j's value contributes to query i, ``out = (A ⊙ G) V``
(a gain for recent items: the rows of ``A ⊙ G`` need not sum to 1; ``A`` is what is recorded).
A gain takes the reference path (SDPA has no such term).
Training on CPU with attention dropout also takes the explicit path: SDPA's CPU kernel falls
back to the same matmuls there but draws its dropout mask with torch's slower ``bernoulli_``
(see ``attnsvm.rec.nn.dropout``); fwd + bwd was 17–45 % faster at B = 32–128, L = 120–200.

**Recording.** ``forward`` returns the attention output only: training and scoring never carry
the lens's tensors. ``record_attention(model)`` is a context manager; while it is active every
``MultiHeadAttention`` of ``model`` takes the reference path, and the ``AttentionRecorder`` it
yields lists per layer (``attention_modules`` order) the ``(B, H, L_q, L_k)`` weights ``A`` and
the ``AttentionInput(query, key)`` the layer consumed. The model's output meanwhile is the
reference path's: equal to the fast path's to float precision, bit for bit where the default
path is the explicit one already (CPU training with attention dropout).
``record_attention(model, weights=False)`` records the inputs only and leaves every layer on
its own path, so the model computes bit for bit what it computes unrecorded.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.nn.dropout import dropout as drop


def attention_mask(valid: torch.Tensor, causal: bool) -> torch.Tensor:
    """Boolean keep-mask ``(B, 1, L, L)``: query t may attend key s.

    Keys at padding positions are never attended; with ``causal`` only keys ``s ≤ t`` are. Every
    query may attend itself, so padding rows (which have no valid key) stay finite; their outputs
    are discarded by the caller, and real rows are unaffected because their diagonal is valid.
    """
    length = valid.shape[1]
    keep = valid[:, None, None, :]
    diagonal = torch.eye(length, dtype=torch.bool, device=valid.device)
    if causal:
        keep = keep & torch.ones_like(diagonal).tril()
    return keep | diagonal


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    keep_mask: torch.Tensor,
    dropout: float,
    bias: torch.Tensor | None = None,
    value_gain: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``((drop(A) ⊙ G) V, A)`` with ``A = softmax(masked(q kᵀ / √d_h + bias))``; without a
    ``value_gain`` G, ``drop(A) V``. Dropout applies to the output only, not to the returned A."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    weights = scores.masked_fill(~keep_mask, float("-inf")).softmax(dim=-1)
    mixing = drop(weights, dropout)
    if value_gain is not None:
        mixing = mixing * value_gain
    return mixing @ v, weights


class AttentionInput(NamedTuple):
    """What a layer's attention consumed: queries from ``query``, keys and values from ``key``."""

    query: torch.Tensor  # (B, L_q, D)
    key: torch.Tensor  # (B, L_k, D); equal to query where the layer attends its own input
    # (B, L_k) window column of each key where the keys are a per-row subset of the window
    # (STRec's later layers); None: the keys are the whole window, in order
    key_positions: torch.Tensor | None = None


class AttentionRecord(NamedTuple):
    """One call of a recorded attention layer."""

    weights: torch.Tensor | None  # (B, H, L_q, L_k) of the reference path; None: not asked for
    inputs: AttentionInput


class MultiHeadAttention(nn.Module):
    #: set by ``record_attention`` only: each call then appends its ``AttentionRecord`` here
    recording: list[AttentionRecord] | None = None
    #: set by ``record_attention(weights=True)``: calls take the reference path and record ``A``
    record_weights: bool = False

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(dim, dim, bias=bias)
        self.k_proj = nn.Linear(dim, dim, bias=bias)
        self.v_proj = nn.Linear(dim, dim, bias=bias)
        self.out_proj = nn.Linear(dim, dim, bias=bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        return x.view(batch, length, self.num_heads, dim // self.num_heads).transpose(1, 2)

    def _project(
        self, query_input: torch.Tensor, key_input: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-head ``(q, k, v)``, each ``(B, H, L, d_h)``; keys and values from ``key_input``."""
        q = self._heads(self.q_proj(query_input))
        return q, self._heads(self.k_proj(key_input)), self._heads(self.v_proj(key_input))

    def _merge(self, heads: torch.Tensor) -> torch.Tensor:
        """``(B, H, L, d_h)`` per-head outputs → ``out_proj`` of their concatenation (B, L, D)."""
        batch, _, length, _ = heads.shape
        return self.out_proj(heads.transpose(1, 2).reshape(batch, length, -1))

    def _record(
        self,
        weights: torch.Tensor | None,
        query_input: torch.Tensor,
        key_input: torch.Tensor,
        key_positions: torch.Tensor | None,
    ) -> None:
        if self.recording is not None:
            inputs = AttentionInput(query_input, key_input, key_positions)
            self.recording.append(AttentionRecord(weights if self.record_weights else None, inputs))

    def pair_bias(
        self, q: torch.Tensor, k: torch.Tensor, keep_mask: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor | None:
        """The per-pair logit term the attention adds: ``bias`` as given (a subclass may add its
        own, as CoPE its position term)."""
        return bias

    def forward(
        self,
        query_input: torch.Tensor,
        key_input: torch.Tensor,
        keep_mask: torch.Tensor,
        *,
        key_positions: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        value_gain: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(B, L_q, D)``; keys and values from ``key_input``. ``key_positions`` places the keys
        in the window where they are a per-row subset of it; only a recording reads it. ``bias``
        and ``value_gain``: the optional per-pair terms of the module docstring."""
        q, k, v = self._project(query_input, key_input)
        bias = self.pair_bias(q, k, keep_mask, bias)
        dropout = self.dropout if self.training else 0.0
        weights = None
        explicit = self.record_weights or value_gain is not None
        if explicit or (dropout > 0.0 and q.device.type == "cpu"):
            # only the terms given: without them, the very call of plain attention
            pair = {"bias": bias, "value_gain": value_gain}
            pair = {name: term for name, term in pair.items() if term is not None}
            out, weights = reference_attention(q, k, v, keep_mask, dropout, **pair)
        else:
            # SDPA adds a float mask to the logits: the bias, −∞ where a key is not kept
            mask = keep_mask if bias is None else bias.masked_fill(~keep_mask, float("-inf"))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        self._record(weights, query_input, key_input, key_positions)
        return self._merge(out)


def attention_modules(model: nn.Module) -> list[MultiHeadAttention]:
    """Every ``MultiHeadAttention`` of ``model`` (itself included), in registration order."""
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


class AttentionRecorder:
    """What ``record_attention`` yields. ``calls[i]``: every call of layer i inside the block, in
    order; ``attention`` and ``layer_inputs`` read each layer's last call.

    A model that puts tokens of its own before its input (MrTransformer's preference tokens)
    attends over more columns than it was given; its records are cut back to the last ``L`` of
    them, the columns of the model's ``(B, L)`` input, so that every layer's records describe the
    same window.
    """

    def __init__(self, modules: list[MultiHeadAttention]) -> None:
        self.modules = modules
        self.calls: list[list[AttentionRecord]] = [[] for _ in modules]
        self.window: int | None = None  # L of the last (B, L) item sequence the model read

    def records(self) -> list[AttentionRecord]:
        """Each layer's last call, cut to the model's input window."""
        out = []
        for index, calls in enumerate(self.calls):
            if not calls:
                raise RuntimeError(f"attention layer {index} did not run inside record_attention")
            out.append(self._in_window(calls[-1]))
        return out

    def _in_window(self, record: AttentionRecord) -> AttentionRecord:
        window = self.window
        key = record.inputs.key
        if window is None or key.shape[1] <= window or record.inputs.key_positions is not None:
            return record
        weights = None if record.weights is None else record.weights[..., -window:, -window:]
        inputs = AttentionInput(record.inputs.query[:, -window:], key[:, -window:])
        return AttentionRecord(weights, inputs)

    @property
    def attention(self) -> list[torch.Tensor]:
        """Per layer ``(B, H, L_q, L_k)`` attention weights (``record_attention(weights=True)``)."""
        weights = [record.weights for record in self.records()]
        if any(w is None for w in weights):
            raise RuntimeError(
                "attention weights were not recorded (record_attention weights=False)"
            )
        return weights

    @property
    def layer_inputs(self) -> list[AttentionInput]:
        """Per layer the ``AttentionInput`` its attention consumed."""
        return [record.inputs for record in self.records()]


@contextmanager
def record_attention(model: nn.Module, *, weights: bool = True) -> Iterator[AttentionRecorder]:
    """Record what every attention layer of ``model`` sees while the block runs.

    ``weights``: layers take the reference path and record ``A`` as well as their inputs (as
    ``attention_weights`` needs); ``False`` leaves every layer on its usual path and records
    the inputs only, so the model computes exactly what it computes outside the block.
    """
    modules = attention_modules(model)
    if any(module.recording is not None for module in modules):
        raise RuntimeError("record_attention: these attention layers are being recorded already")
    recorder = AttentionRecorder(modules)

    def note_window(_, args, __) -> None:
        item_seq = args[0] if args else None
        if (
            isinstance(item_seq, torch.Tensor)
            and item_seq.ndim == 2
            and item_seq.dtype == torch.long
        ):
            recorder.window = item_seq.shape[1]

    hook = model.register_forward_pre_hook(note_window, with_kwargs=True)
    for module, calls in zip(modules, recorder.calls, strict=True):
        module.recording, module.record_weights = calls, weights
    try:
        yield recorder
    finally:
        hook.remove()
        for module in modules:
            # the class defaults: recording off, the module's usual path
            del module.recording, module.record_weights
