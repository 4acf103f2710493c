"""SASRec+ on ML-1M: attnsvm against RecTools 0.19, RePlay 0.22 and RecBole 1.2.1.

One model and config everywhere (``train_published.py``'s ``RUNS["sasrec+"]``; the values are
``benchmarks/peers/_common.py``'s ``CONFIG``): SASRec, full-catalogue cross-entropy, d = 64,
2 blocks, 1 head, FFN 64, dropout 0.1, window 200, Adam(W) lr 1e-3, betas (0.9, 0.98), weight
decay 0, batch 128, the same number of epochs (``--epochs``, default 3) for every library.
Data: ML-1M, the 6,040 / 3,416 / 999,611 version (``ml-1m_seq_origids.txt``, 5-core in one
pass), leave-one-out (last item test, second-to-last validation, the rest train). This script
loads it once with attnsvm and writes one table that every library reads; each library trains
on the train rows and ranks the whole catalogue for all users from train + valid, seen items
excluded. ``../shared/research/peers.md`` has these peers measured on this machine and the
traps of running them fairly; the deviations each peer still has are in its worker's docstring.

Reported per library:

* **s/epoch**: median of the epochs after the first (warm-up); the individual epochs too.
* **eval s**: full-catalogue top-10 for all users, each library's own inference path.
* **peak RSS**: ``ru_maxrss`` of the library's own fresh process (data, training, inference).
* **HR@10 / NDCG@10** of the library's own ranked lists, scored by attnsvm's metric code
  (``attnsvm.rec.eval.metrics_from_topk``) after dropping any seen item the list still holds,
  so no library's protocol (seen-item filtering, tie rules, NDCG normalisation) can hide.
* **ratios**: peer ÷ attnsvm for s/epoch and eval s (> 1: attnsvm is faster).

Fairness choices, per peer:

* **RecTools**: ``loss="softmax"`` and ``pos_encoding_kwargs={"use_scale_factor": True}``
  (item embeddings × √d as in the paper, attnsvm and RePlay). RecTools' default omits the
  scaling and reaches only a third of the HR@10 after 3 epochs (peers.md note 1).
* **RePlay**: ``replay.nn`` SasRec with CE, seen items masked by ``SeenItemsFilter``.
* **RecBole**: its training "epoch" is every prefix of every train sequence (981,491 samples on
  ML-1M, CE on the last position only), about 57 min per epoch on this machine. Its training is
  capped at ``--recbole-cap-seconds`` of wall clock (default 300 s, as in peers.md); its
  s/epoch is **projected** from s/batch × batches per epoch and labelled so, and its metrics
  are after the cap, i.e. at (about) equal wall clock, not equal epochs. The equal-targets
  figure (seconds to train as many next-item targets as one all-position epoch) is reported
  beside it. RecBole does not filter seen items in sequential full ranking: its worker fetches
  top (10 + longest history) and the seen items are dropped here.

Every process uses 2 threads (``torch.set_num_threads(2)``, ``OMP_NUM_THREADS=2``,
``MKL_NUM_THREADS=2``); the libraries run one after another, never two at once, each in a
fresh subprocess of its own virtual environment. Run it on an otherwise idle machine: the
1-minute load average before each library is recorded, and peers.md note 7 found ±10 %
epoch-to-epoch noise even when idle.

The peers' virtual environments (torch first, from the local CPU wheel; any other torch would
download gigabytes; then the package with torch pinned, and anchors.md §5's pins for RecBole):

    echo "torch==2.13.0" > /tmp/venvs/pin.txt
    for name in rectools replay recbole; do
        python3 -m venv /tmp/venvs/$name
        /tmp/venvs/$name/bin/pip install --upgrade pip wheel "setuptools<81"
        /tmp/venvs/$name/bin/pip install torch==2.13.0
    done
    /tmp/venvs/rectools/bin/pip install -c /tmp/venvs/pin.txt "rectools[torch]==0.19.0"
    /tmp/venvs/replay/bin/pip install -c /tmp/venvs/pin.txt "replay-rec[torch]==0.22.0"
    /tmp/venvs/recbole/bin/pip install -c /tmp/venvs/pin.txt recbole==1.2.1 "numpy<1.24" \\
        "pandas<2.3" "scipy<1.12" "scikit-learn<1.4" "setuptools<81"

Run (from the repository root; about 20 minutes on the idle 2-core machine: 3 epochs of
attnsvm, RecTools and RePlay, RecBole's data preparation and 300 s cap, four evaluations):

    .venv/bin/python benchmarks/sasrec_peers.py --root ../shared/data --epochs 3 \\
        --workdir /tmp/sasrec_peers/work --out /tmp/sasrec_peers/results.json
    .venv/bin/python benchmarks/sasrec_peers.py --dry --out /tmp/sasrec_peers_dry.json

``--dry`` checks that everything runs end to end in a few minutes: 300 ML-1M users (items with
fewer than 5 training events among them dropped), 1 epoch, RecBole capped at 20 s. Its numbers
mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

import conditions
from attnsvm.rec.config import DataConfig
from attnsvm.rec.data.datasets import load_dataset
from attnsvm.rec.data.splits import Split
from attnsvm.rec.eval import metrics_from_topk
from attnsvm.rec.train.scoring import load_split

HERE = Path(__file__).resolve().parent
#: attnsvm in float32 (the ratios' base), under bf16 autocast and under torch.compile, then peers
LIBRARIES = ("attnsvm", "attnsvm-bf16", "attnsvm-compile", "rectools", "replay", "recbole")
THREADS = 2
TOP_K = 10
DRY_USERS = 300
DRY_RECBOLE_CAP_SECONDS = 20.0


def peer_config() -> dict:
    """``CONFIG`` of ``peers/_common.py``, the one config every worker trains with."""
    spec = importlib.util.spec_from_file_location("_common", HERE / "peers" / "_common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CONFIG


# -- data ------------------------------------------------------------------------------------


def dry_file(root: str, folder: Path) -> Path:
    """A small ML-1M: its first 300 users, then items with < 5 train events among them dropped
    (repeated until stable) so that every validation and test item also occurs in training."""
    data = load_dataset("ml-1m", root=root)
    sequences = data.to_sequences()
    rows = [data.item_ids[sequences.row(r)].tolist() for r in range(DRY_USERS)]
    while True:
        train_counts = Counter(item for row in rows for item in row[:-2])
        kept = [[item for item in row if train_counts[item] >= 5] for row in rows]
        kept = [row for row in kept if len(row) >= 5]
        if kept == rows:
            break
        rows = kept
    path = folder / "ml-1m-dry.txt"
    users = data.user_ids[:DRY_USERS].tolist()
    lines = (f"{u} {' '.join(map(str, row))}\n" for u, row in zip(users, rows, strict=True))
    path.write_text("".join(lines))
    return path


def write_table(split: Split, path: Path) -> None:
    """The common table: ``user_id,item_id,position,part`` with attnsvm's internal ids."""
    everyone = np.arange(split.num_users)
    for task in (split.valid, split.test):
        if not np.array_equal(task.users, everyone):
            raise ValueError("every user must have a validation and a test item")
    valid_items, test_items = split.valid.targets.items, split.test.targets.items  # one each
    lines = ["user_id,item_id,position,part"]
    for user in range(split.num_users):
        parts = [(item, "train") for item in split.train.row(user).tolist()]
        parts += [(valid_items[user], "valid"), (test_items[user], "test")]
        lines.extend(f"{user},{item},{pos},{part}" for pos, (item, part) in enumerate(parts))
    path.write_text("\n".join(lines) + "\n")


def data_summary(split: Split, max_len: int) -> dict:
    lengths = split.train.lengths
    return {
        "users": int(split.num_users),
        "items": int(split.num_items),
        "interactions": int(lengths.sum() + 2 * len(split.test)),
        "train_rows": int(lengths.sum()),
        # next-item targets per epoch of an all-position model over a window of max_len
        "targets_per_epoch": int(np.minimum(lengths - 1, max_len).sum()),
        # RecBole's samples per epoch: every prefix of every train sequence
        "prefix_samples_per_epoch": int((lengths - 1).sum()),
        "longest_history": int(split.test.history.lengths.max()),
    }


# -- running one library ---------------------------------------------------------------------


def run_library(
    name: str, python: str, args: argparse.Namespace, workdir: Path, data: DataConfig
) -> dict:
    """Run the library's worker in a fresh process; its last line of output is its result."""
    out = workdir / name
    out.mkdir(parents=True, exist_ok=True)
    library, _, variant = name.partition("-")
    command = [
        python,
        str(HERE / "peers" / f"{library}_sasrec.py"),
        "--table",
        str(workdir / "table.csv"),
        "--out",
        str(out),
        "--epochs",
        str(args.epochs),
        "--eval-batch-size",
        str(args.eval_batch_size),
        "--top-k",
        str(TOP_K),
        "--threads",
        str(THREADS),
        "--cap-seconds",
        str(args.recbole_cap_seconds),
    ]
    if library == "attnsvm":
        command += ["--dataset", data.dataset, "--variant", variant or "fp32"]
        if data.root is not None:
            command += ["--root", data.root]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(THREADS),
        "MKL_NUM_THREADS": str(THREADS),
        # RecBole 1.2.1 predates torch's weights_only default (anchors.md §5)
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1",
    }
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    # cwd = the library's own folder: RecBole and Lightning write logs into the working directory
    with conditions.OtherWork() as other:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=out, check=False
        )
    wall = time.perf_counter() - start
    (out / "stdout.log").write_text(done.stdout)
    (out / "stderr.log").write_text(done.stderr)
    if done.returncode:
        tail = done.stderr.strip().splitlines()[-15:]
        return {"library": name, "error": "\n".join(tail), "wall_seconds": wall}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    load_after = os.getloadavg()[0]
    return {
        **result,
        "wall_seconds": wall,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "other_cores": round(other.cores, 2),
        "loaded": other.loaded,
    }


def merged(rounds: list[dict]) -> dict:
    """One library's rounds (A B A B …) as one result: every round's epochs after its first
    (warm-up, compilation), the median evaluation seconds, loaded if any round was; the
    metrics of the first round (the same seed every round)."""
    if len(rounds) == 1 or any("error" in r for r in rounds):
        return rounds[0]
    first = rounds[0]
    result = dict(first)
    result["epoch_seconds"] = [first["epoch_seconds"][0]] + [
        s for r in rounds for s in r["epoch_seconds"][1:]
    ]
    result["eval_seconds"] = statistics.median(r["eval_seconds"] for r in rounds)
    result["eval_seconds_rounds"] = [r["eval_seconds"] for r in rounds]
    result["loaded"] = any(r.get("loaded") for r in rounds)
    result["rounds"] = len(rounds)
    return result


# -- scoring with attnsvm's metric code ------------------------------------------------------


def filtered_topk(users: np.ndarray, items: np.ndarray, split: Split) -> tuple[np.ndarray, dict]:
    """The library's lists in attnsvm's test-user order, seen items dropped, cut to TOP_K.

    Returns the (users, TOP_K) matrix (0 = no item) and counts of what had to be repaired.
    """
    task = split.test
    row_of = {int(u): r for r, u in enumerate(task.users.tolist())}
    raw = np.zeros((len(task), items.shape[1]), dtype=np.int64)
    listed = np.zeros(len(task), dtype=bool)
    for user, ranked in zip(users.tolist(), items, strict=True):
        raw[row_of[user]] = ranked
        listed[row_of[user]] = True
    # seen[r, j]: raw[r, j] is in the user's train + valid history (an int64 key per pair)
    width = split.num_items + 1
    exclude_rows = np.repeat(np.arange(len(task), dtype=np.int64), task.exclude.lengths)
    seen_keys = exclude_rows * width + task.exclude.items
    raw_keys = np.arange(len(task), dtype=np.int64)[:, None] * width + raw
    seen = np.isin(raw_keys, seen_keys) & (raw > 0)
    # stable compaction: unseen items keep their order and move to the front
    order = np.argsort(seen, axis=1, kind="stable")
    kept = np.where(np.take_along_axis(seen, order, axis=1), 0, np.take_along_axis(raw, order, 1))
    topk = kept[:, :TOP_K]
    return topk, {
        "users_missing": int((~listed).sum()),
        "seen_in_raw_top10": int(seen[:, :TOP_K].sum()),
        "short_lists": int((topk == 0).any(axis=1).sum()),
    }


def score(result: dict, split: Split, workdir: Path) -> dict:
    lists = np.load(workdir / result["library"] / "topk.npz")
    topk, repairs = filtered_topk(lists["users"], lists["items"], split)
    metrics, _ = metrics_from_topk(topk, split.test.targets, (TOP_K,), num_items=split.num_items)
    return {**metrics, **repairs}


def check_own_metrics(result: dict) -> None:
    """attnsvm's trainer scores its own test lists too: the same lists must give the same
    numbers here, or the scoring path (user order, seen-item filter) is wrong."""
    own = result.get("own_test_metrics")
    if own is None:
        return
    for name in (f"HR@{TOP_K}", f"NDCG@{TOP_K}"):
        if abs(own[name] - result[name]) > 1e-9:
            raise RuntimeError(f"{name}: scored {result[name]}, the trainer reported {own[name]}")


# -- report ----------------------------------------------------------------------------------


def epoch_seconds(result: dict) -> tuple[float, str]:
    """s/epoch and how it was obtained."""
    if "projected_epoch_seconds" in result:
        return result["projected_epoch_seconds"], "projected: training capped"
    seconds = result["epoch_seconds"]
    if len(seconds) == 1:
        return seconds[0], "1 epoch, includes warm-up"
    return statistics.median(seconds[1:]), f"median of epochs 2..{len(seconds)}"


def ok(result: dict | None) -> bool:
    return bool(result) and "error" not in result


def table(results: dict[str, dict], summary: dict) -> str:
    base = results.get("attnsvm")
    base_epoch = epoch_seconds(base)[0] if ok(base) else None
    base_eval = base["eval_seconds"] if ok(base) else None
    lines = [
        "| library | s/epoch | epochs (s) | s/epoch ÷ attnsvm | eval s (all users, top-10) "
        "| eval ÷ attnsvm | peak RSS (MiB) | HR@10 | NDCG@10 | seen in raw top-10 | load average; "
        "other processes' cores during the run |",
        "|" + "---|" * 11,
    ]
    for name, result in results.items():
        if not ok(result):
            lines.append(f"| {name} | failed: {result['error'].splitlines()[-1][:80]} |" + " |" * 9)
            continue
        per_epoch, how = epoch_seconds(result)
        epochs = ", ".join(f"{s:.1f}" for s in result["epoch_seconds"]) or "capped"
        epoch_ratio = f"{per_epoch / base_epoch:.2f}×" if base_epoch else "–"
        load = (
            f"{result['load_average_before']:.2f}→{result['load_average_after']:.2f}, "
            f"others {result.get('other_cores', 0):.2f} cores"
            + (" **loaded**" if result.get("loaded") else "")
        )
        eval_ratio = f"{result['eval_seconds'] / base_eval:.2f}×" if base_eval else "–"
        lines.append(
            f"| {name} {result.get('version', '')} | {per_epoch:.1f} ({how}) | {epochs} | "
            f"{epoch_ratio} | {result['eval_seconds']:.2f} | {eval_ratio} | "
            f"{result['peak_rss_mib']:.0f} | {result['HR@10']:.4f} | {result['NDCG@10']:.4f} | "
            f"{result['seen_in_raw_top10']} | {load} |"
        )
    recbole = results.get("recbole")
    if ok(recbole):
        lines += ["", recbole_note(recbole, summary, base_epoch)]
    if base_epoch:
        lines += ["", targets_note(results, base_epoch, base_eval)]
    return "\n".join(lines)


def recbole_note(recbole: dict, summary: dict, base_epoch: float | None) -> str:
    """RecBole's epoch is a different unit: say how its numbers were obtained and compare it
    at equal targets too."""
    per_target = recbole["seconds_per_batch"] / recbole["batch_size"]
    equal_targets = per_target * summary["targets_per_epoch"]
    ratio = f" ({equal_targets / base_epoch:.2f}× attnsvm's s/epoch)" if base_epoch else ""
    trained = recbole["trained_samples"] / summary["prefix_samples_per_epoch"]
    if recbole["capped"]:
        budget = (
            f"Training was capped at {recbole['cap_seconds']:.0f} s: "
            f"{recbole['trained_samples']:,} samples in {recbole['train_seconds']:.0f} s "
            f"({trained:.1%} of epoch 1), so its HR/NDCG are at about equal wall clock, "
            "not equal epochs."
        )
    else:
        budget = "All epochs finished within the cap: its HR/NDCG are at equal epochs."
    return (
        f"RecBole: an epoch is every prefix of every train sequence "
        f"({summary['prefix_samples_per_epoch']:,} samples, one target each, "
        f"{recbole['batches_per_epoch']:,} batches); {recbole['seconds_per_batch']:.3f} s/batch "
        f"(median {recbole['median_seconds_per_batch']:.3f}). {budget} Equal targets: "
        f"{equal_targets:.0f} s to train the {summary['targets_per_epoch']:,} targets of one "
        f"all-position epoch{ratio}."
    )


def targets_note(results: dict[str, dict], base_epoch: float, base_eval: float) -> str:
    """The issue's targets, against the fastest peer (RecBole's epoch is not comparable)."""
    peers = {n: r for n, r in results.items() if not n.startswith("attnsvm") and ok(r)}
    per_epoch = {n: epoch_seconds(r)[0] for n, r in peers.items() if n != "recbole"}
    parts = []
    if per_epoch:
        fastest = min(per_epoch, key=per_epoch.get)
        parts.append(
            f"per epoch, fastest peer {fastest} {per_epoch[fastest]:.1f} s, peer ÷ attnsvm "
            f"{per_epoch[fastest] / base_epoch:.2f}× (target ≥ 5×)"
        )
    for variant in ("attnsvm-bf16", "attnsvm-compile"):
        if ok(results.get(variant)):
            seconds = epoch_seconds(results[variant])[0]
            best = min(per_epoch.values()) if per_epoch else None
            peer = f", fastest peer ÷ it {best / seconds:.2f}×" if best else ""
            parts.append(
                f"{variant} {seconds:.1f} s/epoch, float32 ÷ it {base_epoch / seconds:.2f}×{peer}, "
                f"NDCG@10 {results[variant]['NDCG@10']:.4f}"
            )
    compiled = results.get("attnsvm-compile")
    if ok(compiled) and len(compiled["epoch_seconds"]) > 1:
        compile_seconds = compiled["epoch_seconds"][0] - epoch_seconds(compiled)[0]
        parts.append(f"torch.compile: about {compile_seconds:.0f} s of compilation in epoch 1")
    parts.append(f"attnsvm's top-10 for all users {base_eval:.2f} s (target ≤ 1.2 s)")
    if peers:
        fastest = min(peers, key=lambda n: peers[n]["eval_seconds"])
        parts.append(
            f"full-catalogue top-10, fastest peer {fastest} {peers[fastest]['eval_seconds']:.2f} "
            f"s, peer ÷ attnsvm {peers[fastest]['eval_seconds'] / base_eval:.2f}× (target ≥ 2×)"
        )
    equal_epochs = {n: r["NDCG@10"] for n, r in peers.items() if n != "recbole"}
    if equal_epochs:
        best = max(equal_epochs, key=equal_epochs.get)
        parts.append(
            f"NDCG@10 at equal epochs: attnsvm {results['attnsvm']['NDCG@10']:.4f}, best peer "
            f"{best} {equal_epochs[best]:.4f} (target: equal or better)"
        )
    return "Targets: " + "; ".join(parts) + "." if parts else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=str(HERE.parents[1] / "shared" / "data"))
    parser.add_argument("--only", default=",".join(LIBRARIES), help="comma-separated libraries")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--eval-batch-size", type=int, default=256)
    parser.add_argument("--recbole-cap-seconds", type=float, default=None)
    parser.add_argument("--dry", action="store_true", help="300 users, 1 epoch: a smoke test")
    parser.add_argument("--out", type=Path, required=True, help="JSON results")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a new temp folder")
    parser.add_argument("--venvs", type=Path, default=Path("/tmp/venvs"))
    parser.add_argument("--rounds", type=int, default=1, help="A B A B rounds of the libraries")
    args = parser.parse_args()
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(only) - set(LIBRARIES))
    if unknown:
        parser.error(f"unknown libraries {unknown}; choose from {', '.join(LIBRARIES)}")
    if args.dry:
        args.epochs = 1
    if args.recbole_cap_seconds is None:
        args.recbole_cap_seconds = DRY_RECBOLE_CAP_SECONDS if args.dry else 300.0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sasrec_peers-"))
    workdir.mkdir(parents=True, exist_ok=True)
    root = str(Path(args.root).resolve())

    # the dry table is read back by path: attnsvm's reader applies no filter to a plain file
    data = DataConfig(str(dry_file(root, workdir))) if args.dry else DataConfig("ml-1m", root=root)
    split = load_split(data)
    write_table(split, workdir / "table.csv")
    config = peer_config()
    summary = data_summary(split, config["max_len"])
    print(f"data: {summary}; workdir {workdir}", file=sys.stderr)
    machine = conditions.machine()
    print(conditions.describe(machine), file=sys.stderr)

    rounds: dict[str, list[dict]] = {name: [] for name in sorted(only, key=LIBRARIES.index)}
    for _ in range(args.rounds):  # A B A B: every library once per round, attnsvm first
        for name in rounds:
            library = name.partition("-")[0]
            python = (
                sys.executable if library == "attnsvm" else str(args.venvs / library / "bin/python")
            )
            print(f"running {name} …", file=sys.stderr, flush=True)
            result = run_library(name, python, args, workdir, data)
            if "error" not in result:
                result.update(score(result, split, workdir))
                check_own_metrics(result)
            rounds[name].append(result)
            print(json.dumps(result), file=sys.stderr, flush=True)
    results = {name: merged(runs) for name, runs in rounds.items()}

    report = conditions.describe(machine) + "\n\n" + table(results, summary)
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "dry": args.dry,
                "epochs": args.epochs,
                "threads": THREADS,
                "conditions": machine,
                "rounds": args.rounds,
                "config": config,
                "data": summary,
                "recbole_cap_seconds": args.recbole_cap_seconds,
                "eval_batch_size": args.eval_batch_size,
                "workdir": str(workdir),
                "results": results,
                "table": report,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
