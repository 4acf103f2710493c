"""Hyper-parameter search with Optuna: every trial a normal run directory, the study resumable.

``tune(config, space, out_dir, trials=N)`` samples the fields named in ``space`` (any dotted
config key, as ``--set`` takes it), trains each trial with ``train()`` into
``out_dir/trials/trial-NNNN`` and maximises its validation metric (``eval.valid_metric``,
NDCG@10 by default). The study lives in ``out_dir/study.db`` (SQLite):

- **pruning**: each epoch's validation metric is reported to Optuna's median pruner, which
  stops a trial that is below the median of earlier trials at the same epoch (its run directory
  stays ``.incomplete``, as any interrupted run);
- **resuming**: calling ``tune`` again on the same ``out_dir`` continues the study until it holds
  ``trials`` finished (complete or pruned) trials. A trial that was running when the process was
  killed is marked failed (its heartbeat stopped) and retried with the same parameters;
- **outputs**: ``summary.md`` (one row per trial: parameters, validation and test metric, state,
  run directory; complete trials ranked by the validation metric alone, the test metric shown
  but never used to choose) and ``importance.png`` (Optuna's PED-ANOVA parameter importances,
  drawn once ``IMPORTANCE_MIN_TRIALS`` trials are complete; before that the summary says how
  many it needs), rewritten after every trial.

The search space is a TOML file with one table per key::

    [train.lr]            # a float range, sampled log-uniformly
    low = 1e-4
    high = 1e-2
    log = true

    [model.num_blocks]    # an integer range (the field's type decides int or float)
    low = 1
    high = 3

    [loss.name]           # a categorical choice
    choices = ["ce", "bce"]

Optuna is an optional dependency: ``pip install 'attnsvm[tune]'``.
"""

from __future__ import annotations

import math
import tomllib
import typing
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnsvm._atomic import atomic_path, check_output, write_text
from attnsvm._files import read_text
from attnsvm.errors import UnreadableFile
from attnsvm.extras import require
from attnsvm.rec.config import ConfigError, RunConfig, apply_overrides
from attnsvm.rec.config_base import coerce

SECTIONS = ("model", "data", "loss", "train", "eval")
#: PED-ANOVA compares the best ``IMPORTANCE_QUANTILE`` of the complete trials with all of them:
#: with fewer than two trials in that top share (under 11 trials at 10 %) it reads one trial's
#: parameters as the importances, so no plot is drawn below this count
IMPORTANCE_QUANTILE = 0.1
IMPORTANCE_MIN_TRIALS = math.floor(1 / IMPORTANCE_QUANTILE) + 1


@dataclass(frozen=True)
class Dimension:
    """One searched config key: a ``choices`` list, or a ``low``..``high`` range."""

    key: str
    kind: str  # "int" | "float" | "choice"
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def sample(self, trial) -> Any:
        if self.kind == "choice":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.kind == "int":
            step = int(self.step or 1)
            return trial.suggest_int(
                self.key, int(self.low), int(self.high), step=step, log=self.log
            )
        return trial.suggest_float(self.key, self.low, self.high, step=self.step, log=self.log)


def _field_type(config: RunConfig, key: str) -> Any:
    """The type ``key`` (``section.field``) takes in ``config``, or a ConfigError naming it."""
    section, _, name = key.partition(".")
    if section not in SECTIONS or not name:
        raise ConfigError(f"search space: {key!r} is not a 'section.field' key ({SECTIONS})")
    if section == "model":
        from attnsvm.rec.models.registry import lookup

        hints = lookup(config.model.name).fields
    else:
        owner = config.resolved_loss() if section == "loss" else getattr(config, section)
        hints = typing.get_type_hints(type(owner))
    if name not in hints:
        raise ConfigError(f"search space: {key!r} is not a field of [{section}]")
    return hints[name]


def load_space(path: str | Path, config: RunConfig) -> list[Dimension]:
    """The dimensions of a search-space TOML file, checked against ``config``'s fields."""
    path = Path(path)
    try:
        tables = tomllib.loads(read_text(path))  # a regular file of UTF-8 text only
    except UnreadableFile as error:
        raise ConfigError(f"{path}: cannot read the search space ({error.problem})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    dimensions = []
    for section, fields in tables.items():
        if not isinstance(fields, dict):
            raise ConfigError(f"{path}: {section!r} must be a table of keys to search")
        for name, spec in fields.items():
            dimensions.append(_dimension(path, config, f"{section}.{name}", spec))
    if not dimensions:
        raise ConfigError(f"{path}: the search space names no key")
    return dimensions


def _dimension(path: Path, config: RunConfig, key: str, spec: Any) -> Dimension:
    where = f"{path}: {key}"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a table with 'choices' or 'low' and 'high'")
    hint = _field_type(config, key)
    unknown = set(spec) - {"choices", "low", "high", "log", "step"}
    if unknown:
        raise ConfigError(f"{where}: unknown setting {sorted(unknown)[0]!r}")
    if "choices" in spec:
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: choices must be a non-empty list")
        for choice in choices:  # each must be a valid value of the field
            coerce(choice, hint, key, str(path))
        return Dimension(key, "choice", choices=tuple(choices))
    if "low" not in spec or "high" not in spec:
        raise ConfigError(f"{where}: give 'choices', or both 'low' and 'high'")
    kind = "int" if int in (typing.get_args(hint) or (hint,)) else "float"
    if kind == "float" and float not in (typing.get_args(hint) or (hint,)):
        raise ConfigError(f"{where}: a range needs a numeric field; use 'choices'")
    low, high = (
        coerce(spec[k], int if kind == "int" else float, key, str(path)) for k in ("low", "high")
    )
    log = bool(spec.get("log", False))
    if not (math.isfinite(low) and math.isfinite(high) and low < high) or (log and low <= 0):
        raise ConfigError(f"{where}: need low < high (and low > 0 with log = true)")
    return Dimension(key, kind, low, high, log, spec.get("step"))


def _optuna():
    require("tune", "attnsvm tune")  # Optuna, and matplotlib for the plot after the trials
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # heartbeats (how a killed trial is found) are marked experimental; they are what we need
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


class _PruningReporter:
    """A training callback: reports each epoch's validation metric and stops a pruned trial."""

    def __init__(self, trial, metric: str) -> None:
        self.trial, self.metric = trial, metric

    def on_epoch_end(self, state) -> None:
        self.trial.report(state.valid_metrics[self.metric], state.epoch)
        if self.trial.should_prune():
            import optuna

            raise optuna.TrialPruned(f"pruned after epoch {state.epoch}")


def tune(
    config: RunConfig,
    space: list[Dimension],
    out_dir: str | Path,
    trials: int,
    *,
    show_progress: bool = False,
):
    """Run (or continue) the study in ``out_dir`` until it has ``trials`` finished trials;
    returns the Optuna study."""
    optuna = _optuna()
    if trials < 1:
        raise ConfigError(f"tune: --trials must be ≥ 1, got {trials}")
    out = check_output(out_dir, folder=True)
    out.mkdir(parents=True, exist_ok=True)
    with _readable_study(out / "study.db"):
        return _run_study(optuna, config, space, out, trials, show_progress)


@contextmanager
def _readable_study(path: Path) -> Iterator[None]:
    """What SQLite says of a damaged or foreign ``study.db`` as one line naming it."""
    import optuna
    import sqlalchemy.exc

    try:
        yield
    except (sqlalchemy.exc.DBAPIError, optuna.exceptions.StorageInternalError) as error:
        reason = getattr(error, "orig", None) or error.__cause__ or error
        raise UnreadableFile(
            path, f"is not a readable Optuna study ({reason}): move it away to start a new study"
        ) from None


def _run_study(optuna, config, space, out: Path, trials: int, show_progress: bool):
    """``tune``'s study in ``out``, run until it holds ``trials`` finished trials."""
    from attnsvm.rec.train.trainer import train

    # a trial killed mid-run stops its heartbeat; after the grace period the next start marks
    # it failed and the retry callback queues its parameters again
    storage = optuna.storages.RDBStorage(
        f"sqlite:///{out / 'study.db'}",
        heartbeat_interval=1,
        grace_period=3,
        heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
            max_retry=1
        ),
    )
    study = optuna.create_study(
        study_name="attnsvm",
        storage=storage,
        load_if_exists=True,
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=config.train.seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1),
    )
    metric = config.eval.valid_metric

    def objective(trial) -> float:
        values = {dimension.key: dimension.sample(trial) for dimension in space}
        trial_config = apply_overrides(config, [f"{k}={v}" for k, v in values.items()])
        run_dir = out / "trials" / f"trial-{trial.number:04d}"
        trial.set_user_attr("run_dir", str(run_dir))
        reporter = _PruningReporter(trial, metric)
        result = train(trial_config, run_dir, [reporter], show_progress=show_progress)
        trial.set_user_attr("test", result.test[metric])
        return result.valid[metric]

    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    optuna.storages.fail_stale_trials(study)
    done = sum(t.state in finished for t in study.trials)
    if done < trials:
        study.optimize(
            objective,
            callbacks=[
                optuna.study.MaxTrialsCallback(trials, states=finished),
                lambda study, _: write_summary(study, out, metric),
            ],
        )
    write_summary(study, out, metric)
    return study


def complete_trials(study) -> list:
    """The complete trials, best validation metric first (the lower number first among equal
    ones). Pruned trials are left out: Optuna gives them their last reported epoch's value,
    which no complete trial's final value should be ranked against."""
    complete = [t for t in study.trials if t.state.name == "COMPLETE" and t.value is not None]
    return sorted(complete, key=lambda t: (-t.value, t.number))


def best_trial(study):
    """The complete trial with the best validation metric (never the test metric), or None."""
    ranked = complete_trials(study)
    return ranked[0] if ranked else None


def write_summary(study, out: Path, metric: str) -> None:
    """``summary.md`` of the study so far: the complete trials ranked by the validation metric,
    then the others by number; and ``importance.png`` once enough trials are complete (the
    summary says how many are missing instead)."""
    keys = sorted({key for trial in study.trials for key in trial.params})
    header = ["rank", "trial", "state", *keys, f"valid {metric}", f"test {metric}", "run directory"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    ranked = complete_trials(study)
    numbers = {t.number for t in ranked}
    others = [t for t in study.trials if t.number not in numbers]
    for rank, trial in enumerate([*ranked, *others], 1):
        valid = "" if trial.value is None else f"{trial.value:.4f}"
        test = trial.user_attrs.get("test")
        cells = [
            str(rank) if rank <= len(ranked) else "",
            str(trial.number),
            trial.state.name.lower(),
            *(_cell(trial.params.get(key)) for key in keys),
            valid,
            "" if test is None else f"{test:.4f}",
            trial.user_attrs.get("run_dir", ""),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    best = ranked[0] if ranked else None
    lines += [
        "",
        f"ranked by valid {metric} (complete trials only; test {metric} is shown, never ranked)",
        f"best: trial {best.number}" if best else "best: no complete trial yet",
    ]
    plot = out / "importance.png"
    if len(ranked) >= IMPORTANCE_MIN_TRIALS:
        _write_importance(study, plot)
    else:
        plot.unlink(missing_ok=True)  # drawn from fewer trials by an earlier version: misleading
        lines.append(importance_note(len(ranked)))
    write_text(out / "summary.md", "\n".join(lines) + "\n")


def importance_note(complete: int) -> str:
    """What stands in for the importance plot with ``complete`` complete trials."""
    return (
        f"importance: not estimated: it needs {IMPORTANCE_MIN_TRIALS} complete trials "
        f"(its top {IMPORTANCE_QUANTILE:.0%} must hold two), {complete} so far"
    )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _write_importance(study, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    evaluator = PedAnovaImportanceEvaluator(target_quantile=IMPORTANCE_QUANTILE)
    fig, ax = plt.subplots(figsize=(6, 3))
    try:
        with warnings.catch_warnings():  # Optuna warns where the importances come out equal
            warnings.simplefilter("ignore", UserWarning)
            importances = get_param_importances(study, evaluator=evaluator)
    except (RuntimeError, ValueError):  # e.g. every complete trial had the same parameters
        importances = {}
    if importances:
        names = list(importances)[::-1]
        ax.barh(names, [importances[n] for n in names], color="tab:blue")
        ax.set(xlabel="importance for the validation metric (Optuna PED-ANOVA)")
    else:
        ax.text(0.5, 0.5, "importances need complete trials that differ", ha="center")
        ax.set_axis_off()
    fig.tight_layout()
    with atomic_path(path) as temporary:
        fig.savefig(temporary, format="png", dpi=100)
    plt.close(fig)
