"""Data pipeline benchmark: attnsvm against RecBole 1.2.1 and a plain pandas version.

Each pipeline does the same work on the same staged file: load it, apply the standard filter
(ML-1M: users and items with < 5 interactions removed in one pass; Beauty: iterative 5-core, a
no-op on the S3-Rec file), split leave-one-out (valid/test stages included), and produce one
epoch of training batches of every prefix → next item (RecBole's sequential "data
augmentation"; attnsvm's ``last`` objective through ``make_batch``), batch size 256,
left-padded to ``max_len``. attnsvm's SASRec-style ``causal`` epoch is timed too (reported, not
in the ratio). Each pipeline runs in a fresh subprocess, so its peak RSS is its own; the best of
``--repeats`` runs is reported. The end-to-end ratio is RecBole's total / attnsvm's total.

RecBole and pandas live in their own virtual environment, never in the project's:

    python3 -m venv /tmp/venvs/recbole
    /tmp/venvs/recbole/bin/pip install --upgrade pip wheel "setuptools<81"
    /tmp/venvs/recbole/bin/pip install torch==2.13.0
    echo "torch==2.13.0" > /tmp/venvs/pin.txt
    /tmp/venvs/recbole/bin/pip install -c /tmp/venvs/pin.txt recbole==1.2.1 "numpy<1.24" \\
        "pandas<2.3" "scipy<1.12" "scikit-learn<1.4" "setuptools<81"

Run (from the repository root):

    .venv/bin/python benchmarks/data_pipeline.py --data ../shared/data --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import conditions

BATCH_SIZE = 256
CASES = {  # name: (file under the data root, max_len, iterative core)
    "ml-1m": ("ml-1m/ml-1m_seq_origids.txt", 200, False),
    "beauty": ("amazon-beauty/Beauty.txt", 50, True),
}


def _rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Clock:
    def __init__(self) -> None:
        self.stages: dict[str, float] = {}
        self.last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[stage] = now - self.last
        self.last = now


def _reference_step(batch, num_items: int) -> float:
    """Seconds of one forward/backward/update of a small SASRec-like model (2 causal layers,
    d = 64, full softmax) on one batch: what batch building is compared against."""
    import torch

    torch.manual_seed(0)
    embed = torch.nn.Embedding(num_items + 1, 64, padding_idx=0)
    layer = torch.nn.TransformerEncoderLayer(64, 2, 256, dropout=0.2, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    optimizer = torch.optim.Adam([*embed.parameters(), *encoder.parameters()])
    length = batch.inputs.shape[1]
    mask = torch.nn.Transformer.generate_square_subsequent_mask(length)
    start = time.perf_counter()
    hidden = encoder(embed(batch.inputs), mask=mask, is_causal=True)
    logits = hidden @ embed.weight.T
    loss = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), batch.targets.flatten(), ignore_index=0
    )
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return time.perf_counter() - start


# -- the three pipelines (each imports only what its own environment has) ------------------


def run_attnsvm(path: str, max_len: int, iterative: bool, workdir: str) -> dict:
    import numpy as np

    from attnsvm.rec.data.batches import make_batch, make_examples
    from attnsvm.rec.data.readers import read_per_user
    from attnsvm.rec.data.splits import leave_one_out

    base = _rss_mib()
    clock = Clock()
    data = read_per_user(path)
    clock.lap("load")
    data = data.k_core(5, 5, iterative=iterative)
    clock.lap("filter")
    split = leave_one_out(data)
    clock.lap("split")

    def epoch(objective: str) -> list:
        """Every batch of one shuffled epoch of ``objective``'s examples, as the trainer cuts it."""
        examples = make_examples(split.train, objective)
        order = np.random.default_rng(0).permutation(len(examples))
        return [
            make_batch(split.train, examples, order[i : i + BATCH_SIZE], objective, max_len)
            for i in range(0, len(order), BATCH_SIZE)
        ]

    batches = len(epoch("last"))
    clock.lap("epoch")
    causal_epoch = epoch("causal")
    causal = len(causal_epoch)
    clock.lap("causal epoch")
    peak = _peak_mib()  # before the reference step, whose model would dominate it
    step = _reference_step(causal_epoch[0], split.num_items)
    return {
        "stages": clock.stages,
        "batches": batches,
        "causal_batches": causal,
        "step": step,
        "peak_mib": peak,
        "users": data.num_users,
        "items": data.num_items,
        "interactions": len(data),
        "base_mib": base,
    }


def run_pandas(path: str, max_len: int, iterative: bool, workdir: str) -> dict:
    import numpy as np
    import pandas as pd

    base = _rss_mib()
    clock = Clock()
    lines = pd.Series(Path(path).read_text().splitlines()).str.split()
    frame = pd.DataFrame({"user": lines.str[0].astype(int), "item": lines.str[1:]})
    frame = frame.explode("item", ignore_index=True)
    frame["item"] = frame["item"].astype(int)
    clock.lap("load")
    while True:
        users = frame.groupby("user")["item"].transform("size")
        items = frame.groupby("item")["user"].transform("size")
        keep = (users >= 5) & (items >= 5)
        frame = frame[keep]
        if keep.all() or not iterative:
            break
    item_codes, item_index = np.unique(frame["item"].to_numpy(), return_inverse=True)
    frame = frame.assign(item=item_index + 1).reset_index(drop=True)
    clock.lap("filter")
    position = frame.groupby("user").cumcount()
    size = frame.groupby("user")["item"].transform("size")
    train = frame[position < size - 2]
    valid = frame[position == size - 2]
    test = frame[position == size - 1]
    histories = train.groupby("user")["item"].apply(list)
    valid_history = {u: set(h) for u, h in histories.items()}
    test_history = {
        u: valid_history[u] | {v} for u, v in zip(valid["user"], valid["item"], strict=True)
    }
    clock.lap("split")
    samples, targets = [], []
    for sequence in histories:
        for k in range(1, len(sequence)):
            window = sequence[max(0, k - max_len) : k]
            samples.append([0] * (max_len - len(window)) + window)
            targets.append(sequence[k])
    order = np.random.default_rng(0).permutation(len(samples))
    batches = 0
    for begin in range(0, len(order), BATCH_SIZE):
        chunk = order[begin : begin + BATCH_SIZE]
        np.array([samples[k] for k in chunk]), np.array([targets[k] for k in chunk])
        batches += 1
    clock.lap("epoch")
    return {
        "stages": clock.stages,
        "batches": batches,
        "users": int(frame["user"].nunique()),
        "items": int(item_codes.size),
        "interactions": len(frame),
        "valid": len(valid),
        "test": len(test),
        "excluded": len(test_history),
        "base_mib": base,
    }


def run_recbole(path: str, max_len: int, iterative: bool, workdir: str) -> dict:
    import logging

    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation

    logging.disable(logging.CRITICAL)
    base = _rss_mib()
    config = Config(
        model="SASRec",
        dataset="bench",
        config_dict={
            "data_path": workdir,
            "checkpoint_dir": str(Path(workdir) / "saved"),
            "USER_ID_FIELD": "user_id",
            "ITEM_ID_FIELD": "item_id",
            "TIME_FIELD": "timestamp",
            "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
            "user_inter_num_interval": "[5,inf)",
            "item_inter_num_interval": "[5,inf)",
            "MAX_ITEM_LIST_LENGTH": max_len,
            "train_batch_size": BATCH_SIZE,
            "eval_batch_size": BATCH_SIZE,
            "loss_type": "CE",
            "train_neg_sample_args": None,
            "eval_args": {
                "split": {"LS": "valid_and_test"},
                "order": "TO",
                "group_by": "user",
                "mode": "full",
            },
            "show_progress": False,
            "save_dataset": False,
            "save_dataloaders": False,
            "seed": 0,
            "reproducibility": True,
        },
    )
    clock = Clock()
    dataset = create_dataset(config)  # RecBole loads and filters in one step
    clock.lap("load+filter")
    counts = {
        "users": dataset.user_num - 1,
        "items": dataset.item_num - 1,
        "interactions": dataset.inter_num,
    }
    train = data_preparation(config, dataset)[0]  # also builds the valid/test loaders
    clock.lap("split")
    batches = sum(1 for _ in train)
    clock.lap("epoch")
    return {"stages": clock.stages, "batches": batches, **counts, "base_mib": base}


WORKERS = {"attnsvm": run_attnsvm, "pandas": run_pandas, "recbole": run_recbole}


def _recbole_inputs(source: Path, workdir: Path) -> None:
    """RecBole reads atomic files: write the same sequences as ``bench.inter`` (not timed)."""
    folder = workdir / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "bench.inter").open("w") as out:
        out.write("user_id:token\titem_id:token\ttimestamp:float\n")
        for line in source.read_text().splitlines():
            user, *items = line.split()
            out.writelines(f"{user}\t{item}\t{t}\n" for t, item in enumerate(items))


def worker(args: argparse.Namespace) -> None:
    result = WORKERS[args.worker](args.file, args.max_len, args.iterative, args.workdir)
    result.setdefault("peak_mib", _peak_mib())
    print(json.dumps(result))


def _run(python: str, name: str, case: str, root: Path, workdir: Path) -> dict:
    file, max_len, iterative = CASES[case]
    command = [
        python,
        __file__,
        "--worker",
        name,
        "--file",
        str(root / file),
        "--max-len",
        str(max_len),
        "--workdir",
        str(workdir),
    ]
    if iterative:
        command.append("--iterative")
    env = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=workdir, check=False
    )
    if done.returncode:
        raise RuntimeError(f"{name} on {case} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parents[2] / "shared" / "data")
    parser.add_argument("--recbole-python", default="/tmp/venvs/recbole/bin/python")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", choices=sorted(WORKERS))
    parser.add_argument("--file")
    parser.add_argument("--max-len", type=int)
    parser.add_argument("--iterative", action="store_true")
    parser.add_argument("--workdir")
    args = parser.parse_args()
    conditions.report()
    if args.worker:
        worker(args)
        return
    pythons = {
        "attnsvm": sys.executable,
        "pandas": args.recbole_python,
        "recbole": args.recbole_python,
    }
    print(
        "| dataset | pipeline | load | filter | split | epoch | total (s) | peak RSS (MiB) "
        "| above start (MiB) | batches |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case, (file, _, _) in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            _recbole_inputs(args.data / file, workdir)
            totals = {}
            for name, python in pythons.items():
                runs = [_run(python, name, case, args.data, workdir) for _ in range(args.repeats)]
                best = min(
                    runs,
                    key=lambda r: sum(v for k, v in r["stages"].items() if k != "causal epoch"),
                )
                stages = best["stages"]
                total = sum(v for k, v in stages.items() if k != "causal epoch")
                totals[name] = total
                if "load+filter" in stages:
                    load, filt = f"{stages['load+filter']:.2f} (with filter)", "–"
                else:
                    load, filt = f"{stages['load']:.2f}", f"{stages['filter']:.2f}"
                counts = f"{best['users']:,} / {best['items']:,} / {best['interactions']:,}"
                print(
                    f"| {case} ({counts}) | {name} | {load} | {filt} | {stages['split']:.2f} | "
                    f"{stages['epoch']:.2f} | **{total:.2f}** | {best['peak_mib']:.0f} | "
                    f"{best['peak_mib'] - best['base_mib']:.0f} | {best['batches']:,} |"
                )
                if "causal epoch" in stages:
                    print(
                        f"| {case} | attnsvm causal epoch (SASRec batches, not in total) | | | "
                        f"| {stages['causal epoch']:.2f} | | | | {best['causal_batches']:,} |"
                    )
                    print(
                        f"| {case} | reference: one training step, 2-layer d=64 full softmax "
                        f"| | | | {best['step']:.2f} | | | | 1 |"
                    )
            print(
                f"| {case} | **RecBole / attnsvm** | | | | | "
                f"**{totals['recbole'] / totals['attnsvm']:.1f}×** | | | |"
            )
            print(
                f"| {case} | pandas / attnsvm | | | | | "
                f"{totals['pandas'] / totals['attnsvm']:.1f}× | | | |"
            )


if __name__ == "__main__":
    main()
