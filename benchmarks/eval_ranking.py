"""Full-catalogue top-10 for 6,040 users x 3,416 items, random 64-d dot-product model."""
import sys
import time

import numpy as np
import torch

from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.eval import evaluate, rank_topk

n_users, n_items, d = 6040, 3416, 64
rng = np.random.default_rng(0)
# ML-1M-like history lengths (mean ~165, min 20): 1.0M seen items in all
lengths = np.clip(rng.lognormal(4.5, 1.0, n_users).astype(np.int64), 20, n_items - 1)
history = Sequences.from_lists([rng.choice(np.arange(1, n_items + 1), n, replace=False).tolist() for n in lengths])
targets = Sequences.from_lists([[int(rng.integers(1, n_items + 1))] for _ in range(n_users)])
task = EvalTask(np.arange(n_users), history, targets, history)
g = torch.Generator().manual_seed(0)
users = torch.randn(n_users, d, generator=g)
items = torch.randn(n_items + 1, d, generator=g)
score_fn = lambda rows: users[torch.from_numpy(rows)] @ items.T  # noqa: E731
bs = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
print("seen items:", history.items.size, "threads:", torch.get_num_threads(), "batch:", bs)
for _ in range(2):
    rank_topk(score_fn, task, n_items, 10, batch_size=bs)
times = []
for _ in range(7):
    t = time.perf_counter(); rank_topk(score_fn, task, n_items, 10, batch_size=bs); times.append(time.perf_counter() - t)
print(f"rank_topk k=10: median {np.median(times):.3f} s  min {min(times):.3f} s")
times = []
for _ in range(5):
    t = time.perf_counter(); r = evaluate(score_fn, task, n_items, (1, 5, 10, 20), batch_size=bs); times.append(time.perf_counter() - t)
print(f"evaluate ks=1,5,10,20: median {np.median(times):.3f} s  min {min(times):.3f} s")
print(r.metrics["HR@10"], r.metrics["coverage@10"])
