"""``attnsvm tune``: an Optuna search over any config field, each trial a run directory."""

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def tune(
        config: Path = typer.Option(..., help="The base run config (TOML or JSON)."),
        space: Path = typer.Option(..., help="The search space (TOML; see attnsvm.rec.tune)."),
        trials: int = typer.Option(20, help="Finished trials the study should hold."),
        out: Path = typer.Option(Path("runs/tune"), help="Study folder: study.db, trials/."),
    ) -> None:
        """Search hyper-parameters; run it again on the same --out to continue the study."""
        from rich.console import Console

        from attnsvm.rec.config import load_config
        from attnsvm.rec.tune import best_trial, load_space
        from attnsvm.rec.tune import tune as run_study

        base = load_config(config)
        study = run_study(base, load_space(space, base), out, trials, show_progress=True)
        console = Console()
        console.print((out / "summary.md").read_text(), highlight=False, markup=False)
        best = best_trial(study)  # by validation, complete trials only: as the summary ranks
        if best is not None:
            console.print(f"best trial {best.number}: {best.params}", markup=False)
        if (out / "importance.png").is_file():  # otherwise the summary says why there is none
            console.print(f"importance plot: {out / 'importance.png'}", markup=False)
