"""Data parallelism under ``torchrun``: the same command runs on 1 or N processes.

Every process builds the same global batch (same seed, same sampling), keeps its own contiguous
shard of rows, and scales its loss so that the all-reduced *sum* of gradients equals the gradient
of the global-batch mean loss. One optimiser step therefore gives the same parameters on any
number of processes (up to float summation order). Evaluation ranks a shard of users per
process and gathers the top-k lists in user order, so metrics are identical for 1 and N.

Backend: gloo on CPU, nccl on GPU. Without ``torchrun`` (no ``WORLD_SIZE``) nothing is set up
and every helper is the identity.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

CPU = torch.device("cpu")


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world_size: int = 1
    device: torch.device = CPU

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def describe(context: Context) -> str:
    """Where the training runs, for the logs: seconds mean little without it."""
    if context.device.type == "cuda":
        where = torch.cuda.get_device_name(context.device)
    else:
        where = f"cpu, {torch.get_num_threads()} thread(s)"
    return where if context.world_size == 1 else f"{where} × {context.world_size} processes"


def init_from_env() -> Context:
    """Join the torchrun process group if ``WORLD_SIZE`` > 1; the device follows the backend."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return Context(0, 1, device)
    rank = int(os.environ["RANK"])
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend)
    return Context(rank, world_size, device)


def shard(rows: int, context: Context) -> slice:
    """The contiguous block of ``rows`` this process owns (sizes differ by at most one)."""
    bounds = np.linspace(0, rows, context.world_size + 1).round().astype(int)
    return slice(int(bounds[context.rank]), int(bounds[context.rank + 1]))


def sum_scalar(value: float, context: Context) -> float:
    if not context.distributed:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=context.device)
    dist.all_reduce(tensor)
    return float(tensor.item())


def all_reduce_gradients(model: torch.nn.Module, context: Context) -> None:
    """Sum every gradient over processes, in one flat buffer."""
    if not context.distributed:
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def broadcast_parameters(model: torch.nn.Module, context: Context) -> None:
    """Start every process from rank 0's weights."""
    if not context.distributed:
        return
    for tensor in model.state_dict().values():
        dist.broadcast(tensor, src=0)


def gather_rows(local: np.ndarray, total_rows: int, context: Context) -> np.ndarray:
    """Concatenate every process's ``shard`` rows of an int64 array back in row order."""
    if not context.distributed:
        return local
    longest = max(
        shard(total_rows, Context(r, context.world_size)).stop
        - shard(total_rows, Context(r, context.world_size)).start
        for r in range(context.world_size)
    )
    padded = np.zeros((longest, *local.shape[1:]), dtype=np.int64)
    padded[: len(local)] = local
    tensor = torch.from_numpy(padded).to(context.device)
    parts = [torch.empty_like(tensor) for _ in range(context.world_size)]
    dist.all_gather(parts, tensor)
    pieces = []
    for r, part in enumerate(parts):
        owned = shard(total_rows, Context(r, context.world_size))
        pieces.append(part[: owned.stop - owned.start].cpu().numpy())
    return np.concatenate(pieces)


def broadcast_object(value: object, context: Context) -> object:
    """Rank 0's ``value`` on every process (e.g. a run directory named by the clock)."""
    if not context.distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(context: Context) -> None:
    if context.distributed:
        dist.barrier()


def shutdown(context: Context) -> None:
    if context.distributed and dist.is_initialized():
        dist.destroy_process_group()
