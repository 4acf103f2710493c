"""``attnsvm train --recipe NAME|FILE``: a staged recipe (``attnsvm.rec.train.recipe``), and
``attnsvm train --resume OUT`` on a recipe's folder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attnsvm.rec.config import ConfigError
from attnsvm.rec.data.catalog import DATASETS

if TYPE_CHECKING:
    from attnsvm.rec.train.recipe import RecipeResult


def train_recipe(
    recipe: str | None,
    resume: Path | None,
    single_run_options: tuple,
    data: str | None,
    root: str | None,
    overrides: list[str] | None,
    out_dir: Path | None,
    progress: bool,
) -> RecipeResult:
    """Run (or, with ``resume``, continue) a recipe; returns its ``RecipeResult``."""
    from attnsvm.rec.train.recipe import resume_recipe, run_recipe

    if any(option is not None for option in single_run_options):
        raise ConfigError("--recipe names its models and configs itself: no --model or --config")
    if resume is not None:
        if any(v is not None for v in (recipe, data, root, overrides, out_dir)):
            raise ConfigError("--resume continues a recipe as it was planned; give no options")
        return resume_recipe(resume, show_progress=progress)
    if out_dir is None:
        raise ConfigError("--recipe needs --out, the folder of its stages")
    # file paths are stored absolute, so every stage reads the same data from anywhere
    if data is not None and data not in DATASETS and Path(data).exists():
        data = str(Path(data).resolve())
    root = str(Path(root).resolve()) if root is not None else None
    return run_recipe(recipe, out_dir, data, root, overrides or [], show_progress=progress)
