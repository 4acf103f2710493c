"""Issue 35's two comparisons on its 277 k-item log: training throughput and evaluation speed,
today's code against the code the issue was filed on, in one run.

The log is ``scale.generate_log``'s (power-law popularity, sequential structure) at the issue's
sizes: 9.85 M events, 200 k users, 277 k items, written once as Parquet under ``--work``. Both
trees read it through the same ``data.columns`` path, so they train and rank the same split.

- **training**: ``--steps`` steps of SASRec+ (batch 128, window 200, d = 64), one thread, the
  epoch-1 batch order of the run's seed, for each arm; throughput in sequences/s over the timed
  steps (the first ``WARMUP`` excluded), then NDCG@10 of the trained model on a fixed sample of
  validation users. Arms: ``per_position`` (the issue's setting: sampled softmax, 256 uniform
  negatives drawn per position, log-q), run by the old tree and by this one; ``mixed`` and
  ``shared`` (1,024 negatives shared by the step: half from the batch's targets, or all from the
  popularity sampler; log-q), this tree only.
- **evaluation**: the ``mixed`` arm's weights ranked over every item for a fixed sample of test
  users, seen items excluded, by the old tree and by this one, one thread; users/s and the
  metrics, which must be identical.

    .venv/bin/python benchmarks/catalogue_speed.py --work /tmp/cat277 --old-tree /tmp/old-tree

(``--part evaluation`` ranks the weights an earlier training part left under ``--work``;
``--old-tree``: a worktree of the commit before issue 35's changes, ``git worktree add --detach
/tmp/old-tree cf105cc^``.) Each measurement runs in a child process of the tree it measures
(``PYTHONPATH``), on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
EVENTS, ITEMS, USERS = 9_850_000, 277_000, 200_000
WARMUP = 3
ARMS = {
    "per_position": {"name": "sampled_softmax", "num_negatives": 256, "logq_correction": True},
    "mixed": {
        "name": "sampled_softmax",
        "num_negatives": 1024,
        "negatives": "mixed",
        "logq_correction": True,
    },
    "shared": {
        "name": "sampled_softmax",
        "num_negatives": 1024,
        "negatives": "shared",
        "sampler": "popularity",
        "logq_correction": True,
    },
}


def log_path(work: Path) -> Path:
    path = work / f"log-{EVENTS}-{ITEMS}-{USERS}-0.parquet"
    if not path.exists():
        sys.path.insert(0, str(REPOSITORY / "benchmarks"))
        import scale

        work.mkdir(parents=True, exist_ok=True)
        scale.generate_log(EVENTS, ITEMS, USERS, seed=0).write_parquet(path)
    return path


def run_config(log: Path, arm: str, steps: int):
    from attnsvm.rec.config import RunConfig

    return RunConfig.from_dict(
        {
            "model": {"name": "sasrec+", "hidden_size": 64},
            "data": {"dataset": str(log), "columns": "user=user,item=item,time=time"},
            "loss": ARMS[arm],
            "train": {"batch_size": 128, "steps_per_epoch": steps, "epochs": 1, "seed": 0},
            "eval": {"ks": [10], "batch_size": 512},
        }
    )


def sample(task, users: int):
    """A fixed sample of a task's rows (the same in both trees: the same split, the same draw)."""
    import numpy as np

    from attnsvm.rec.data.sequences import EvalTask

    rows = np.sort(np.random.default_rng(0).permutation(len(task))[:users])
    return EvalTask(
        task.users[rows],
        task.history.select(rows),
        task.targets.select(rows),
        task.exclude.select(rows),
    )


def child_train(args: argparse.Namespace) -> dict:
    """One training arm in this process's tree: sequences/s, then validation NDCG@10."""
    import torch

    from attnsvm.rec.train import distributed
    from attnsvm.rec.train.loop import TrainingLoop
    from attnsvm.rec.train.scoring import build, evaluate_model, load_split

    torch.set_num_threads(1)
    config = run_config(log_path(args.work), args.arm, args.steps)
    # built by hand, not by ``trainer.training_loop``: the old tree measured here lacks it
    split = load_split(config.data)
    model = build(config, split.num_items)
    loop = TrainingLoop(config, split, model, distributed.Context())
    generator = loop.begin_epoch(1)
    order = torch.randperm(len(loop.examples), generator=generator).numpy()
    batch = config.train.batch_size
    timed, start = 0, None
    for step in range(args.steps):
        if step == WARMUP:
            start = time.perf_counter()
        index = order[step * batch : (step + 1) * batch]
        loop.train_step(index, generator)
        timed += len(index) if step >= WARMUP else 0
    seconds = time.perf_counter() - start
    valid = evaluate_model(model, sample(split.valid, args.users), split.num_items, config.eval)
    torch.save(model.state_dict(), args.work / f"weights-{args.arm}.pt")
    return {"sequences_per_s": timed / seconds, "valid": valid.metrics}


def child_evaluate(args: argparse.Namespace) -> dict:
    """The ``mixed`` arm's weights ranked for a sample of test users by this process's tree."""
    import torch

    from attnsvm.rec.train.scoring import build, evaluate_model, load_split

    torch.set_num_threads(1)
    config = run_config(log_path(args.work), "per_position", 1)
    split = load_split(config.data)
    model = build(config, split.num_items)
    model.load_state_dict(torch.load(args.work / "weights-mixed.pt", weights_only=True))
    task = sample(split.test, args.users)
    start = time.perf_counter()
    result = evaluate_model(model, task, split.num_items, config.eval)
    seconds = time.perf_counter() - start
    return {"users_per_s": len(task) / seconds, "test": result.metrics}


def in_tree(tree: Path, args: argparse.Namespace, *extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--work", str(args.work), "--users", str(args.users)]
    done = subprocess.run([*command, *extra], env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{tree}: {' '.join(extra)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--old-tree", type=Path, default=None)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--users", type=int, default=4000)
    parser.add_argument("--child", choices=("train", "evaluate"), default=None)
    parser.add_argument("--arm", choices=sorted(ARMS), default="mixed")
    parser.add_argument(
        "--part",
        choices=("both", "training", "evaluation"),
        default="both",
        help="evaluation alone ranks the weights a training run left under --work",
    )
    args = parser.parse_args(argv)
    if args.child == "train":
        print(json.dumps(child_train(args)))
        return
    if args.child == "evaluate":
        print(json.dumps(child_evaluate(args)))
        return
    if args.old_tree is None:
        parser.error("--old-tree is needed (see the docstring)")
    log_path(args.work)
    os.system("uptime")
    trees = {"issue 35 filed": args.old_tree, "this tree": REPOSITORY}
    training = [
        ("issue 35 filed", "per_position"),
        ("this tree", "per_position"),
        ("this tree", "mixed"),
        ("this tree", "shared"),
    ]
    rows = []
    for tree, arm in training if args.part != "evaluation" else []:
        steps = ["--steps", str(args.steps), "--arm", arm]
        result = in_tree(trees[tree], args, "--child", "train", *steps)
        rows.append((tree, arm, result))
        print(f"train {tree:15} {arm:13} {json.dumps(result)}", flush=True)
    if rows:
        baseline = rows[0][2]["sequences_per_s"]
        print(
            f"\n| tree | loss | sequences/s (1 thread) | ratio | NDCG@10 after {args.steps} steps |"
        )
        print("|---|---|---|---|---|")
        for tree, arm, result in rows:
            rate = result["sequences_per_s"]
            ndcg = result["valid"]["NDCG@10"]
            print(f"| {tree} | {arm} | {rate:.1f} | {rate / baseline:.2f}× | {ndcg:.4f} |")
    if args.part == "training":
        os.system("uptime")
        return
    evaluations = {tree: in_tree(path, args, "--child", "evaluate") for tree, path in trees.items()}
    old, new = evaluations["issue 35 filed"], evaluations["this tree"]
    print(f"\n| tree | users/s (1 thread, {args.users} test users × {ITEMS} items) | ratio |")
    print("|---|---|---|")
    for tree, result in evaluations.items():
        rate = result["users_per_s"]
        print(f"| {tree} | {rate:.1f} | {rate / old['users_per_s']:.2f}× |")
    print(f"metrics identical: {old['test'] == new['test']} ({new['test']})")
    os.system("uptime")


if __name__ == "__main__":
    main()
