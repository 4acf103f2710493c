"""RLT4Rec's own training: batches of episodes drawn from the simulator or the logs, the
official one-pass loss, model selection on simulated validation users, a run directory.

The official ``train_rlt.py`` procedure: each step draws ``batch_size`` sequences of a random
length 1..``steps`` (25), either

- ``"random"`` (``get_batch_online``, the paper's "bad data"): a random group, items drawn
  uniformly without repetition, rated by the simulator; or
- ``"logged"`` (``get_batch_offline``): a random subset, in random order, of one real user's
  ratings of the simulator's items (the data the simulator was fitted on);

and minimises ``CE(actions) + rating_loss_weight · MSE(ratings)`` with AdamW (lr 5e-3, weight
decay 1e-5, torch's betas), gradients clipped at 1, 30 epochs of 1,000 steps. After each epoch
the model plays the cold-start episodes (``episodes.py``) with simulated *validation* users
(the official code selects on its test file) and the best epoch's weights are kept; the test
users (``test_users`` per group, 200 as ``evaluate_online``) are played once at the end.

The run directory has the platform's layout (``config.json``, ``model.json``,
``model.safetensors``, ``id_maps.json`` over the simulator's items, ``log.jsonl``,
``metrics.json``) plus ``simulation.json``, a copy of the simulator (``simulator/``) and the test
episodes (``episodes.json``/``.npz``/``.png``), so ``attnsvm rl episodes`` can replay it
(``attnsvm evaluate`` cannot: its catalogue is the simulator's, not the dataset's). There is no
``--resume``: an interrupted ``RUN.incomplete`` is deleted and the run started again.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnsvm._atomic import write_json
from attnsvm.extras import require
from attnsvm.rec.config import ConfigError, DataConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.data.sequences import Sequences
from attnsvm.rec.models import MODELS, resolve
from attnsvm.rec.sim.episodes import EpisodeResult, run_episodes, save_results
from attnsvm.rec.sim.policies import model_policy
from attnsvm.rec.sim.simulator import GroupSimulator
from attnsvm.rec.train import distributed
from attnsvm.rec.train.checkpoint import WEIGHTS, RunDirectory, load_weights, save_weights
from attnsvm.rec.train.loop import TrainingError, epoch_seed
from attnsvm.rec.train.optim import adamw
from attnsvm.rec.train.scoring import seed_everything

SOURCES = ("random", "logged")
#: the official train_rlt.py schedule; AdamW with torch's default betas
OFFICIAL_TRAIN = TrainConfig(
    epochs=30,
    steps_per_epoch=1000,
    batch_size=128,
    lr=5e-3,
    weight_decay=1e-5,
    betas=(0.9, 0.999),
    grad_clip=1.0,
)


@dataclass(frozen=True)
class EpisodeSettings:
    source: str = "random"  # "random" (the paper's bad data) | "logged"
    steps: int = 25  # longest training sequence and the episodes' length
    valid_users: int = 25  # simulated validation users per group (model selection)
    test_users: int = 200  # simulated test users per group (the official evaluate_online)
    users_seed: int = 0  # draws the users: the same for every model seed and every policy

    def check(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"source must be one of {SOURCES}, got {self.source!r}")
        for name in ("steps", "valid_users", "test_users"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be ≥ 1, got {getattr(self, name)}")


def random_episodes(
    simulator: GroupSimulator, count: int, steps: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` left-padded (items, ratings) rows: a random group and length 1..``steps``,
    distinct items drawn uniformly, rated by the simulator."""
    groups = rng.integers(simulator.num_groups, size=count)
    lengths = rng.integers(1, steps + 1, size=count)
    picks = np.argsort(rng.random((count, simulator.num_items)), axis=1)[:, :steps] + 1
    ratings = simulator.draw(groups, picks, rng)
    real = np.arange(steps) >= steps - lengths[:, None]
    return np.where(real, picks, 0), np.where(real, ratings, 0.0)


def logged_episodes(
    histories: Sequences, count: int, steps: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` left-padded rows, each a random subset (length 1..min(n, ``steps``)) of one
    user's rated items in random order."""
    rows = rng.choice(len(histories), size=count, replace=len(histories) < count)
    lengths = histories.lengths[rows]
    take = rng.integers(1, np.minimum(lengths, steps) + 1)
    starts = np.cumsum(lengths) - lengths
    owner = np.repeat(np.arange(count), lengths)
    flat = np.repeat(histories.offsets[rows], lengths) + np.arange(owner.size) - starts[owner]
    shuffled = flat[np.lexsort((rng.random(owner.size), owner))]  # rows stay where they were
    place = np.arange(owner.size) - starts[owner]
    kept = place < take[owner]
    columns = steps - take[owner[kept]] + place[kept]
    items, ratings = np.zeros((count, steps), np.int64), np.zeros((count, steps))
    items[owner[kept], columns] = histories.items[shuffled[kept]]
    ratings[owner[kept], columns] = histories.ratings[shuffled[kept]]
    return items, ratings


def logged_histories(simulator: GroupSimulator) -> Sequences:
    """The ratings the simulator was fitted on, per user, in simulator item ids."""
    from attnsvm.rec.data.datasets import load_dataset

    source = simulator.source
    if "dataset" not in source:
        raise ConfigError(
            "the simulator does not name its dataset: refit it with attnsvm rl simulator"
        )
    data = load_dataset(source["dataset"], root=source.get("root"))
    index = {str(item): i + 1 for i, item in enumerate(simulator.item_ids.tolist())}
    column = np.array([index.get(str(item), 0) for item in data.item_ids.tolist()])
    keep = column[data.item] > 0
    users, items, ratings = data.user[keep], column[data.item[keep]], data.rating[keep]
    lengths = np.bincount(users, minlength=data.num_users)
    present = lengths > 0
    offsets = np.concatenate([[0], np.cumsum(lengths[present])])
    return Sequences(offsets, items, np.flatnonzero(present), None, ratings)


def episode_run_config(simulator: GroupSimulator, overrides: dict[str, Any], train: TrainConfig):
    """The run's ``config.json``: RLT4Rec on the simulator's dataset, the official schedule
    unless ``train`` says otherwise."""
    source = simulator.source
    data = DataConfig(dataset=source.get("dataset", "simulator"), root=source.get("root"))
    return RunConfig(model=ModelChoice("rlt4rec", overrides), data=data, train=train)


def train_rlt4rec(
    simulator_dir: str | Path,
    run_dir: str | Path,
    config: RunConfig,
    settings: EpisodeSettings | None = None,
    *,
    log=print,
) -> dict[str, Any]:
    """Train RLT4Rec on episodes (module docstring); returns the published ``metrics.json``."""
    settings = settings or EpisodeSettings()
    settings.check()
    require("plots", "RLT4Rec's episode training")  # its test episodes' curve, at the end
    simulator = GroupSimulator.load(simulator_dir)
    name, model_config, _ = resolve(config.model.name, **config.model.overrides)
    if name != "rlt4rec":
        raise ConfigError(f"episode training is RLT4Rec's; the config names {name!r}")
    if settings.steps > model_config.max_len:
        raise ConfigError(f"steps {settings.steps} > model.max_len {model_config.max_len}")
    if settings.steps > simulator.num_items:
        raise ConfigError(f"steps {settings.steps} > the simulator's {simulator.num_items} items")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    seed_everything(config.train.seed)
    model = MODELS[name].model_class(simulator.num_items, model_config).to(device)
    histories = logged_histories(simulator) if settings.source == "logged" else None
    users = {  # drawn before the run directory exists: too many is refused with nothing left
        "valid": simulator.users(settings.valid_users, settings.users_seed, stream=1),
        "test": simulator.users(settings.test_users, settings.users_seed, stream=0),
    }
    run = RunDirectory.create(run_dir)
    try:
        _write_header(run, config, model, simulator, settings, simulator_dir)
        trainer = _EpisodeTrainer(
            run, model, simulator, histories, users, settings, config.train, log
        )
        return trainer.train()
    finally:
        run.release()


class _EpisodeTrainer:
    def __init__(self, run, model, simulator, histories, users, settings, train, log) -> None:
        self.run, self.model, self.simulator, self.histories = run, model, simulator, histories
        self.settings, self.train_config, self.log = settings, train, log
        self.device = next(model.parameters()).device
        self.optimizer = adamw(model.parameters(), train)
        self.steps_per_epoch = train.steps_per_epoch or OFFICIAL_TRAIN.steps_per_epoch
        self.valid_users, self.test_users = users["valid"], users["test"]
        self.total_steps = 0

    def batch(self, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        size, steps = self.train_config.batch_size, self.settings.steps
        if self.histories is None:
            items, ratings = random_episodes(self.simulator, size, steps, rng)
        else:
            items, ratings = logged_episodes(self.histories, size, steps, rng)
        return torch.from_numpy(items).to(self.device), torch.from_numpy(ratings).to(self.device)

    def epoch(self, epoch: int) -> dict[str, Any]:
        train, model = self.train_config, self.model
        rng = np.random.default_rng(epoch_seed(train.seed, epoch, 0))
        torch.manual_seed(epoch_seed(train.seed, epoch, 1))
        model.train()
        start, sums = time.perf_counter(), np.zeros(2)
        for _ in range(self.steps_per_epoch):
            actions, rated = model.episode_losses(*self.batch(rng))
            loss = actions + model.config.rating_loss_weight * rated
            if not torch.isfinite(loss):
                raise TrainingError(f"RLT4Rec's loss became {loss.item()} at epoch {epoch}")
            self.optimizer.zero_grad()
            loss.backward()
            if train.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
            self.optimizer.step()
            sums += (actions.item(), rated.item())
            self.total_steps += 1
        seconds = time.perf_counter() - start
        valid = _play(model, self.simulator, self.valid_users, self.settings.steps, "valid")
        return {
            "epoch": epoch,
            "step": self.total_steps,
            "action_loss": sums[0] / self.steps_per_epoch,
            "rating_loss": sums[1] / self.steps_per_epoch,
            "train_seconds": seconds,
            "device": distributed.describe(distributed.Context(device=self.device)),
            "valid": {f"mean_rating@{self.settings.steps}": valid.mean},
        }

    def train(self) -> dict[str, Any]:
        history, best, best_epoch = [], -np.inf, 0
        for epoch in range(1, self.train_config.epochs + 1):
            record = self.epoch(epoch)
            history.append(record)
            score = record["valid"][f"mean_rating@{self.settings.steps}"]
            if score > best:
                best, best_epoch = score, epoch
                save_weights(self.model, self.run.work / WEIGHTS)
            self.run.write_log(history)
            self.log(
                f"epoch {epoch:>3}  CE {record['action_loss']:.4f}  rating MSE "
                f"{record['rating_loss']:.4f}  valid mean rating {score:.4f}"
                f"{' *' if best_epoch == epoch else ''}  {record['train_seconds']:.1f}s"
            )
        return self.publish(history, best_epoch)

    def publish(self, history: list[dict[str, Any]], best_epoch: int) -> dict[str, Any]:
        steps = self.settings.steps
        load_weights(self.model, self.run.work / WEIGHTS)
        test = _play(self.model, self.simulator, self.test_users, steps, "rlt4rec")
        save_results([test], self.run.work)
        metrics = {
            "protocol": f"cold-start episodes of {steps} recommendations on the group-Gaussian "
            f"simulator ({self.settings.test_users} test users per group)",
            "test": {f"mean_rating@{steps}": test.mean, "standard_error": test.standard_error},
            "valid": history[best_epoch - 1]["valid"],
            "best_epoch": best_epoch,
            "epochs": len(history),
            "stopped_early": False,
            "train_seconds": float(sum(r["train_seconds"] for r in history)),
            "devices": [history[0]["device"]],
            "steps": self.total_steps,
        }
        write_json(self.run.work / "metrics.json", metrics)
        self.run.finish()
        return metrics


def _play(model, simulator, users, steps, name) -> EpisodeResult:
    policy = model_policy(model, simulator, name=name, device=next(model.parameters()).device)
    return run_episodes(policy, users, steps)


def _write_header(run, config, model, simulator, settings, simulator_dir) -> None:
    """What the run is, written before it trains (``RunDirectory.write_header``'s files over
    the simulator's catalogue, whose users are simulated: no user ids)."""
    numeric = simulator.item_ids.dtype.kind in "iu"
    catalogue = _Catalogue(
        simulator.num_items,
        np.array([0 if numeric else "", *simulator.item_ids.tolist()], dtype=object),
        np.zeros(0, dtype=np.int64),
    )
    model_info = {"model": "rlt4rec", "model_config": model.config.to_dict()}
    run.write_header(config, model_info, catalogue)
    simulator.save(run.work / "simulator")
    simulation = {**asdict(settings), "simulator": str(Path(simulator_dir).resolve())}
    write_json(run.work / "simulation.json", simulation)


@dataclass(frozen=True)
class _Catalogue:
    """The fields of a ``Split`` that ``write_header`` reads."""

    num_items: int
    item_ids: np.ndarray
    user_ids: np.ndarray
