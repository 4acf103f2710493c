"""Training beside a busy core: attnsvm's thread policy against torch's default threads.

Another job is a bounded busy loop (``conditions.BusyCore``: a child spinning on the last core,
started before the measured run and stopped after it). Each measured run is a fresh process
that trains with ``train()``, in one of two settings:

* **attnsvm policy**: ``attnsvm.process.configure_process()`` first, as the CLI does (a short
  OpenMP spin set before torch loads, threads = the cores not busy elsewhere at start, glibc
  keeps freed memory);
* **torch default**: nothing changed: one thread per core, libgomp's long default spin (what
  attnsvm's CLI did before the policy).

Workloads: the demo's model (``demo_config()``: SASRec+, 1 block, d = 64, window 20, the planted
data; 3 epochs, samples/s of epochs 2-3) and SASRec+ on ML-1M (the K&V config, window 200, batch
128; 2 epochs of ``--steps`` steps, samples/s of epoch 2). Runs interleave (workload, idle then
busy, policy then default), ``--repeats`` times; medians. The target: with one busy core beside
it, the policy keeps at least half its idle samples/s. Load averages before and after each run
are recorded; the idle rows are only claims where the load was below the cores.

    .venv/bin/python benchmarks/train_contention.py --root ../shared/data [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import conditions

WORKER = """
import dataclasses, json, sys, tempfile
workload, policy, root, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if policy == "attnsvm policy":  # first: the OpenMP spin is read when torch loads
    from attnsvm.process import configure_process
    configure_process()
from attnsvm.rec.config import DataConfig, ModelChoice, RunConfig, TrainConfig, EvalConfig
from attnsvm.rec.train.demo import demo_config
from attnsvm.rec.train.trainer import train
if workload == "demo":
    config = demo_config()
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, epochs=3))
else:
    config = RunConfig(
        model=ModelChoice("sasrec+", {}),
        data=DataConfig(dataset="ml-1m", root=root),
        train=TrainConfig(epochs=2, steps_per_epoch=steps, batch_size=128, seed=0),
        eval=EvalConfig(valid_users=256),
    )
with tempfile.TemporaryDirectory() as folder:
    result = train(config, folder + "/run", show_progress=False)
    log = [json.loads(line) for line in open(str(result.run_dir) + "/log.jsonl")]
rates = [record["samples_per_second"] for record in log[1:]]  # the first epoch warms up
print(json.dumps({"samples_per_second": sum(rates) / len(rates), "threads": log[-1]["threads"]}))
"""

WORKLOADS = ("demo", "sasrec+ ml-1m")
POLICIES = ("attnsvm policy", "torch default")


def measure(workload: str, policy: str, busy: bool, args) -> dict:
    command = [sys.executable, "-c", WORKER, workload, policy, args.root, str(args.steps)]
    before = conditions.load()
    if busy:
        with conditions.BusyCore(args.bound):
            output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    else:
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    result = json.loads(output.splitlines()[-1])
    result["load"] = [round(before, 2), round(conditions.load(), 2)]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="../shared/data", help="folder holding ml-1m/")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=15, help="ML-1M steps per epoch")
    parser.add_argument("--bound", type=float, default=600.0, help="busy loop's limit (s)")
    parser.add_argument("--json", default=None, help="also write the runs and conditions here")
    args = parser.parse_args()
    info = conditions.machine()
    print(conditions.describe(info), flush=True)
    runs = conditions.idle_and_busy(
        WORKLOADS,
        POLICIES,
        args.repeats,
        lambda workload, policy, busy: measure(workload, policy, busy, args),
    )
    print("| workload | setting | threads idle / busy | idle samples/s | one busy core | "
          "busy ÷ idle (target ≥ 0.5) | load |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for workload in WORKLOADS:
        for policy in POLICIES:
            idle, busy = runs[workload, policy, False], runs[workload, policy, True]
            idle_rate = statistics.median(r["samples_per_second"] for r in idle)
            busy_rate = statistics.median(r["samples_per_second"] for r in busy)
            threads = f"{idle[0]['threads']} / {busy[0]['threads']}"
            print(
                f"| {workload} | {policy} | {threads} | {idle_rate:.0f} | {busy_rate:.0f} "
                f"| {busy_rate / idle_rate:.2f} | {conditions.load_range(idle + busy)} |"
            )
    conditions.write_runs(args.json, info, runs)


if __name__ == "__main__":
    main()
