"""Hooks the trainer calls at the end of every epoch (on the main process only).

A callback is any object with ``on_epoch_end(state: EpochState) -> None``. ``AttentionSnapshots``
stores every attention layer's query and key projections each epoch, which is what the lens needs
to follow ``W = W_K W_Qᵀ / √d_head`` per head (and its correlation to the Att-SVM solution) over
training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from safetensors.torch import save as serialize

from attnsvm._atomic import write_bytes
from attnsvm.rec.models import SequentialRecommender


@dataclass(frozen=True)
class EpochState:
    epoch: int  # 1-based number of the epoch that just ended
    step: int  # optimiser steps so far
    model: SequentialRecommender
    train_loss: float
    valid_metrics: dict[str, float]
    run_dir: Path  # the directory being written (``RUN_DIR.incomplete`` while training)


class Callback(Protocol):
    def on_epoch_end(self, state: EpochState) -> None: ...


class AttentionSnapshots:
    """``attention/epoch_NNNN.safetensors``: per layer ``layer{i}.q_weight`` (D, D), ``q_bias``,
    ``k_weight``, ``k_bias``; metadata ``num_heads`` and ``head_dim``.

    Head h uses rows ``h·d_head : (h+1)·d_head`` (``q_h``, ``k_h``) of each weight. Its attention
    logit between a query input x_q and a key input x_k is ``x_q W_h x_kᵀ`` (biases aside) with
    ``W_h = q_hᵀ k_h / √d_head`` — in the paper's row-vector notation ``W = W_Q W_Kᵀ / √d`` with
    ``W_Q = q_hᵀ`` (``nn.Linear`` stores the transpose). Epoch 0 is the
    initialisation, written by ``on_train_begin``.
    """

    def __init__(self, folder: str = "attention") -> None:
        self.folder = folder

    def on_train_begin(self, model: SequentialRecommender, run_dir: Path) -> None:
        if not (run_dir / self.folder / "epoch_0000.safetensors").exists():
            self._save(model, run_dir, 0)

    def on_epoch_end(self, state: EpochState) -> None:
        self._save(state.model, state.run_dir, state.epoch)

    def _save(self, model: SequentialRecommender, run_dir: Path, epoch: int) -> None:
        tensors: dict[str, torch.Tensor] = {}
        layers = model.attention_modules()
        for i, attention in enumerate(layers):
            for name, projection in (("q", attention.q_proj), ("k", attention.k_proj)):
                tensors[f"layer{i}.{name}_weight"] = projection.weight.detach().cpu().clone()
                if projection.bias is not None:
                    tensors[f"layer{i}.{name}_bias"] = projection.bias.detach().cpu().clone()
        dim = layers[0].q_proj.weight.shape[0] if layers else 0
        heads = [attention.num_heads for attention in layers]
        metadata = {
            "epoch": str(epoch),
            "num_layers": str(len(layers)),
            "num_heads": json.dumps(heads),
            "head_dim": json.dumps([dim // h for h in heads]),
        }
        path = run_dir / self.folder / f"epoch_{epoch:04d}.safetensors"
        write_bytes(path, serialize(tensors, metadata=metadata))  # a full disk: an OSError
