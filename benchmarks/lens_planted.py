"""The planted-trigger lens check at full size (the CI test ``tests/lens/test_lens_planted.py``
runs a small version).

    python benchmarks/lens_planted.py [--out /tmp/lens-planted]

A 1-layer, 1-head SASRec+ trained on ``make_planted`` data (every last item decided by one
earlier trigger), once with the standard block and once without its FFN (``ffn_size = 0``, the
theory's linear head): how often its last-position attention selects the trigger, how often
the lens's optimal token (linear and counterfactual score) is the trigger, and the correlation
of ``W`` to the final Att-SVM solutions over the epochs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.lens.planted import planted_run

import conditions

FULL_SIZE = {
    "users": 3000,
    "items": 200,
    "length": 20,
    "triggers": 16,
    "max_gap": 4,
    "hidden": 32,
    "epochs": 30,
    "sequences": 200,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("/tmp/lens-planted"))
    args = parser.parse_args()
    conditions.report()
    if args.out.exists():
        shutil.rmtree(args.out)
    print(f"config {FULL_SIZE}")
    for ffn in (True, False):
        folder = args.out / ("with-ffn" if ffn else "no-ffn")
        folder.mkdir(parents=True)
        start = time.perf_counter()
        result = planted_run(folder, ffn=ffn, **FULL_SIZE)
        print(
            f"\n## {'standard block' if ffn else 'no FFN (ffn_size = 0)'}: "
            f"{time.perf_counter() - start:.0f} s (training + lens report)"
        )
        print(f"test HR@10 {result['test']['HR@10']:.3f}, NDCG@10 {result['test']['NDCG@10']:.3f}")
        for key in (
            "attention_on_trigger",
            "linear_optimal_is_trigger",
            "linear_optimal_is_trigger_without_target_copy",
            "counterfactual_optimal_is_trigger",
        ):
            print(f"{key}: {result[key]:.1%}")
        print("epoch | corr(W, W^mm_F) | corr(W, W^mm_*)")
        for row in result["epochs"]:
            print(
                f"{row['epoch']} | {row.get('frobenius', float('nan')):.3f} | "
                f"{row.get('nuclear', float('nan')):.3f}"
            )
        print(f"report: {result['report']}")


if __name__ == "__main__":
    main()
