"""A paper's claim as a comparison the campaign can run, and the verdict its seeds allow.

A :class:`Claim` names a system arm and a baseline (or ablation) arm, the metric and the
direction the paper says the system moves it, and the protocol; a *cell* is one seed of one
claim: both arms trained with that seed. Cells are the campaign's unit of work and each must
fit :data:`CELL_LIMIT_MINUTES` of one core.

The verdict never certifies noise: the relative difference ``(system − baseline) / baseline`` is
taken per seed, and its mean's 95 % t-interval over the seeds decides. "supported" needs at least
:data:`MIN_SEEDS` seeds and an interval wholly on the paper's side of ``−margin`` (``margin`` 0: a
strict improvement; a positive margin: "no worse than margin", a non-inferiority claim);
"contradicted" needs the interval wholly on the other side; anything else is "not shown".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CELL_LIMIT_MINUTES = 90
MIN_SEEDS = 3


@dataclass(frozen=True)
class Claim:
    """One paper claim turned into a comparison (module docstring)."""

    id: str
    system: str  # the registry name reported for the system arm
    claim: str  # the paper's claim, in words
    dataset: str
    protocol: str  # split, ranking, budget; any reduction from the paper's own protocol
    system_arm: str
    baseline_arm: str
    metric: str
    minutes: float  # estimated CPU-minutes of one cell (one seed, both arms, nothing cached)
    direction: int = 1  # +1: the paper says the system raises the metric; −1: lowers it
    margin: float = 0.0  # relative: 0.05 reads "no worse than 5 %"
    priority: int = 1  # lower runs first
    lead: int | None = None  # the first seed's priority, where a first reading should come early
    seeds: tuple[int, ...] = (0, 1, 2)
    paper: str = "—"  # the paper's own figure for this comparison, where one exists
    # why no cell of it runs here, with the measured cost: not scheduled unless named by --only
    out_of_reach: str = ""
    # differences in the metric's own units, not relative to the baseline (whose value may be 0:
    # SRT from scratch hits no cold item); the margin is then in those units too
    absolute: bool = False

    def __post_init__(self) -> None:
        if self.direction not in (1, -1):
            raise ValueError(f"claim {self.id}: direction must be +1 or -1")
        if self.lead is not None and self.lead > self.priority:
            raise ValueError(f"claim {self.id}: the first seed's lead must not trail the rest")
        if not 0 < self.minutes <= CELL_LIMIT_MINUTES:
            raise ValueError(
                f"claim {self.id}: a cell is estimated at {self.minutes} CPU-minutes; it must fit "
                f"0 < minutes ≤ {CELL_LIMIT_MINUTES} (reduce the protocol and say so)"
            )


@dataclass(frozen=True)
class Comparison:
    """A claim's seeds summarised: relative differences, their interval, and the verdict."""

    seeds: int
    system_mean: float
    system_sd: float
    baseline_mean: float
    baseline_sd: float
    relative: float  # mean over seeds of (system − baseline) / baseline
    low: float  # 95 % t-interval of ``relative`` (nan below two seeds)
    high: float
    better: int  # seeds on which the system moved the metric the paper's way
    verdict: str


def compare_seeds(
    system: list[float],
    baseline: list[float],
    direction: int = 1,
    margin: float = 0.0,
    absolute: bool = False,
) -> Comparison:
    """Paired per seed: ``system[i]`` and ``baseline[i]`` share a seed; the differences are
    relative to the baseline, or with ``absolute`` in the metric's units."""
    if len(system) != len(baseline) or not system:
        raise ValueError("compare_seeds needs the same, non-zero number of seeds in both arms")
    n = len(system)
    pairs = list(zip(system, baseline, strict=True))
    if absolute:
        relative = [s - b for s, b in pairs]
    else:
        relative = [(s - b) / abs(b) if b != 0 else math.nan for s, b in pairs]
    mean = sum(relative) / n
    if n >= 2:
        from scipy import stats  # here: a cell, which imports this module, starts without it

        sd = math.sqrt(sum((r - mean) ** 2 for r in relative) / (n - 1))
        half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
        low, high = mean - half, mean + half
    else:
        low = high = math.nan
    verdict = "not shown"
    if n >= MIN_SEEDS and not math.isnan(low):
        toward_low, toward_high = (low, high) if direction == 1 else (-high, -low)
        if toward_low > -margin:
            verdict = "supported"
        elif toward_high < -margin:
            verdict = "contradicted"
    better = sum(1 for s, b in pairs if direction * (s - b) > 0)
    return Comparison(
        n,
        _mean(system),
        _sd(system),
        _mean(baseline),
        _sd(baseline),
        mean,
        low,
        high,
        better,
        verdict,
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _sd(values: list[float]) -> float:
    if len(values) < 2:
        return math.nan
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
