"""The campaign's manifest: every arm and every claim, in the order the issue asks for them.

Each claim's protocol says where it departs from the paper's (a smaller dataset, a cut epoch
budget given to both arms alike); the estimate of a cell is its CPU-minutes on one core from
scratch, taken from the runs recorded in RESULTS.md (or a timed first epoch where none exist).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import sdat_ablation
import srt_transfer
import zoo
from attnsvm.rec.config import RunConfig
from campaign.arms import Arm, Outcome, Workspace, fresh, read_run, train_run, trained
from campaign.claims import Claim

ROOT = zoo.ROOT
LIKED = 4.0  # CRR's liked targets: rated ≥ 4


def zoo_arm(dataset: str, name: str, setting: str = "paper", **train) -> Arm:
    """The zoo's setting of ``name`` (``benchmarks/zoo.py``): leave-one-out, full ranking, up to
    200 epochs with patience 10 on validation NDCG@10; ``train`` overrides its train section."""
    key = f"{dataset}/{name}-{setting}" + "".join(f"-{k}={v}" for k, v in sorted(train.items()))

    def config(seed: int) -> RunConfig:
        base = zoo.run_config(dataset, name, setting, seed, ROOT)
        return dataclasses.replace(base, train=dataclasses.replace(base.train, **train))

    system = "sam" if train.get("optimizer") == "sam" else zoo.SETTINGS[name].model
    return trained(key, system, config)


def sdat_arm(dataset: str, variant: str) -> Arm:
    args = argparse.Namespace(root=ROOT, max_len=200, epochs=200, steps_per_epoch=None, threads=1)
    key = f"{dataset}/sdat-study/{variant}"
    system = sdat_ablation.VARIANTS[variant][0]
    return trained(key, system, lambda seed: sdat_ablation.run_config(dataset, variant, seed, args))


def crr_arm(stage1: Arm, epochs: int = 30) -> Arm:
    """CRR's stage 2 (exp advantage weight, its defaults) from ``stage1``'s run of the seed,
    read on the same test users: NDCG@10, HR@10, and HR@10 over the users whose test item they
    rated ≥ 4 ("liked HR@10")."""
    key = f"{stage1.key}/crr-exp"

    def make(seed: int, space: Workspace) -> Outcome:
        from attnsvm.rec.rl.crr import CRRConfig
        from attnsvm.rec.rl.crr_trainer import crr_run_config, train_crr

        space.result(stage1.key, seed)
        first = space.folder(stage1.key, seed) / "run"
        run = space.folder(key, seed) / "run"
        if fresh(run):
            train_crr(crr_run_config(first, {"epochs": epochs}), CRRConfig(weight="exp"), run)
        return liked(read_run(run), run)

    return Arm(key, "crr", make, needs=(stage1.key,))


def liked_stage1(arm: Arm) -> Arm:
    """``arm`` read with the liked-target HR@10 beside its test metrics (CRR's baseline)."""
    key = f"{arm.key}/liked"

    def make(seed: int, space: Workspace) -> Outcome:
        space.result(arm.key, seed)
        run = space.folder(arm.key, seed) / "run"
        return liked(read_run(run), run)

    return Arm(key, arm.system, make, needs=(arm.key,))


def liked(outcome: Outcome, run: Path) -> Outcome:
    from attnsvm.rec.eval import EvalResult
    from attnsvm.rec.rl.rated import target_ratings
    from attnsvm.rec.train.runs import open_run

    opened = open_run(run)
    mask = target_ratings(opened.run.config.data, opened.task, "test") >= LIKED
    per_user = EvalResult.load(run / "test_eval.json").per_user["HR@10"]
    return Outcome({**outcome.metrics, "liked HR@10": float(per_user[mask].mean())}, outcome.epochs)


def srt_arm(variant: str, split: str = "temporal") -> list[Arm]:
    """``benchmarks/srt_transfer.py``'s runs on ML-100K (``srt-tuned`` from SRT pre-trained on
    ML-1M, ``srt-scratch``), read with the HR@10 on cold test targets beside the metrics; the
    tuned variant brings its pre-training arm along."""
    args = argparse.Namespace(
        root=ROOT,
        max_len=200,
        lr=1e-3,
        objective="causal",
        epochs=200,
        steps=None,
        threads=1,
        pretrain="ml-1m",
        out=None,
    )
    key = f"ml-100k-{split}/srt-study/{variant}"
    pre_key = "ml-1m/srt-study/srt-pre"

    def make(seed: int, space: Workspace) -> Outcome:
        run_args = argparse.Namespace(**vars(args), out=space.root / "runs" / "srt-study")
        if variant == "srt-tuned":
            space.result(pre_key, seed)
        config = srt_transfer.config(variant, "ml-100k", split, seed, run_args)
        if variant == "srt-tuned":
            source = space.folder(pre_key, seed) / "run"
            config = dataclasses.replace(
                config, train=dataclasses.replace(config.train, init_from=str(source))
            )
        run = train_run(config, space.folder(key, seed) / "run")
        hit, _ = srt_transfer.cold_hit_rate(run)
        outcome = read_run(run)
        return Outcome({**outcome.metrics, "cold HR@10": hit}, outcome.epochs)

    def make_pre(seed: int, space: Workspace) -> Outcome:
        run_args = argparse.Namespace(**vars(args), out=space.root / "runs" / "srt-study")
        config = srt_transfer.config("srt-scratch", "ml-1m", "leave-one-out", seed, run_args)
        return read_run(train_run(config, space.folder(pre_key, seed) / "run"))

    if variant == "srt-tuned":
        return [Arm(key, "srt", make, needs=(pre_key,)), Arm(pre_key, "srt", make_pre)]
    return [Arm(key, "srt", make)]


ARMS: dict[str, Arm] = {}


def _add(*arms: Arm | list[Arm]) -> None:
    for arm in arms:
        for one in arm if isinstance(arm, list) else [arm]:
            ARMS[one.key] = one


CRR_STAGE1 = zoo_arm("ml-100k", "sasrec+")
CRR_BASE = liked_stage1(CRR_STAGE1)
CRR = crr_arm(CRR_STAGE1)
_add(CRR_STAGE1, CRR_BASE, CRR)

SDAT_DATASETS = ("ml-100k", "ml-latest-small")
for _dataset in SDAT_DATASETS:
    _add(*(sdat_arm(_dataset, variant) for variant in sdat_ablation.VARIANTS))

ETREC = zoo_arm("ml-100k", "etrec")
SASREC_ML100K = CRR_STAGE1
_add(ETREC)

_add(srt_arm("srt-tuned"), srt_arm("srt-scratch"))

SDAT_PARTS = {
    "sdat-no-bias": "the log-interval attention bias",
    "sdat-no-gain": "the recency value gain",
    "sdat-no-time-encoding": "the time-gap encoding (learned positions instead)",
    "sdat-no-gru": "the GRU head",
}
LOO = "leave-one-out, full ranking, seen items excluded, all users"
ZOO = f"{LOO}; the zoo's setting (CE, d = 64, 2 blocks, batch 128, ≤ 200 epochs, patience 10)"


def _sdat_claims() -> list[Claim]:
    claims = []
    for dataset in SDAT_DATASETS:
        study = f"{dataset}/sdat-study"
        protocol = f"{LOO}; SASRec+'s setting, window 200 (sdat_ablation.py)"
        claims.append(
            Claim(
                f"sdat-vs-sasrec-{dataset}",
                "sdat",
                "SDAT's time-aware attention beats a position-only transformer",
                dataset,
                protocol,
                f"{study}/sdat",
                f"{study}/sasrec+",
                "NDCG@10",
                minutes=25,
                priority=3,
            )
        )
        for variant, part in SDAT_PARTS.items():
            claims.append(
                Claim(
                    f"sdat-{variant.removeprefix('sdat-')}-{dataset}",
                    "sdat",
                    f"{part} helps SDAT (ablation: the whole model against it removed)",
                    dataset,
                    protocol,
                    f"{study}/sdat",
                    f"{study}/{variant}",
                    "NDCG@10",
                    minutes=25,
                    priority=3,
                )
            )
    return claims


CLAIMS: list[Claim] = [
    Claim(
        "crr-liked-hr",
        "crr",
        "offline RL stage 2 (CRR) raises the hit rate on items the user rated highly over its "
        "supervised stage 1",
        "ml-100k",
        f"{LOO}; stage 1 SASRec+ (zoo setting), stage 2 CRR exp-weight ≤ 30 epochs patience 5",
        CRR.key,
        CRR_BASE.key,
        "liked HR@10",
        minutes=15,
        priority=1,
    ),
    Claim(
        "crr-ndcg-kept",
        "crr",
        "CRR's stage 2 keeps overall accuracy (NDCG@10 no more than 5 % below stage 1)",
        "ml-100k",
        f"{LOO}; as crr-liked-hr",
        CRR.key,
        CRR_BASE.key,
        "NDCG@10",
        minutes=15,
        margin=0.05,
        priority=1,
    ),
    *_sdat_claims(),
    Claim(
        "etrec-vs-sasrec",
        "etrec",
        "ETRec's local + block attention is as accurate as full attention (no worse than 5 %)",
        "ml-100k",
        ZOO + "; window 50",
        ETREC.key,
        SASREC_ML100K.key,
        "NDCG@10",
        minutes=10,
        margin=0.05,
        priority=4,
    ),
    Claim(
        "srt-transfer-cold",
        "srt",
        "SRT pre-trained on another catalogue (ML-1M) recommends cold items better than SRT "
        "trained from scratch",
        "ml-100k",
        "temporal 80/10/10 split of ML-100K (149 cold test targets), full ranking; SRT preset "
        "(sampled softmax, log-q), all-position objective (the paper's every-prefix one costs "
        "30×), window 200, ≤ 200 epochs patience 10; pre-training on ML-1M leave-one-out",
        "ml-100k-temporal/srt-study/srt-tuned",
        "ml-100k-temporal/srt-study/srt-scratch",
        "cold HR@10",
        minutes=80,
        priority=5,
    ),
    Claim(
        "srt-transfer-ndcg",
        "srt",
        "SRT pre-trained on ML-1M is more accurate on ML-100K than SRT trained from scratch",
        "ml-100k",
        "as srt-transfer-cold",
        "ml-100k-temporal/srt-study/srt-tuned",
        "ml-100k-temporal/srt-study/srt-scratch",
        "NDCG@10",
        minutes=80,
        priority=5,
    ),
]

for _claim in CLAIMS:
    for _arm in (_claim.system_arm, _claim.baseline_arm):
        if _arm not in ARMS:
            raise KeyError(f"claim {_claim.id} names arm {_arm!r}, which the manifest lacks")
