"""What every experiment returns: metrics, notes, acceptance checks, and its figures."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from attnsvm._atomic import atomic_path, write_text

#: A figure maker: draws into a new matplotlib Figure it is given.
Plotter = Callable[[plt.Figure], None]


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.bool_ | bool):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return None if not math.isfinite(float(value)) else float(value)
    return value


@dataclass
class ExperimentResult:
    """``metrics`` and ``config`` go to ``results.json``; ``figures`` maps PNG names to plotters.

    ``checks`` are the acceptance criteria of theory.md §3 evaluated on this run (name -> passed);
    ``notes`` say where and why this run differs from the official notebook.
    """

    name: str
    config: dict
    metrics: dict
    checks: dict[str, bool]
    notes: list[str]
    seconds: float
    figures: dict[str, Plotter] = field(default_factory=dict)

    def __post_init__(self):
        self.checks = {name: bool(ok) for name, ok in self.checks.items()}

    def to_json(self) -> dict:
        return _jsonable(
            {
                "experiment": self.name,
                "config": self.config,
                "seconds": self.seconds,
                "checks": self.checks,
                "notes": self.notes,
                "metrics": self.metrics,
            }
        )

    def save(self, out_dir: str | Path) -> list[Path]:
        """Write ``results.json`` and the PNG figures into ``out_dir``; returns the paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_json(), indent=2, allow_nan=False)
        paths = [out / "results.json"]
        write_text(paths[0], text + "\n")
        for name, plot in self.figures.items():
            fig = plt.figure(figsize=(11, 4.2))
            try:
                plot(fig)
                fig.tight_layout()
                path = out / name
                with atomic_path(path) as temporary:
                    fig.savefig(temporary, format="png", dpi=110)
                paths.append(path)
            finally:
                plt.close(fig)
        return paths

    @property
    def passed(self) -> bool:
        return all(self.checks.values())


def quantiles(values) -> dict[str, float]:
    """mean / median / 10th / 5th percentile of the finite values (NaN-free summary)."""
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return {"count": 0}
    return {
        "count": int(a.size),
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "p10": float(np.percentile(a, 10)),
        "p5": float(np.percentile(a, 5)),
        "min": float(a.min()),
        "max": float(a.max()),
    }
