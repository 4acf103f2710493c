"""``attnsvm stream``: the prequential stream protocol (``attnsvm.rec.stream``)."""

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def stream(
        out: Annotated[Path, typer.Option(help="Run directory to create (or to --resume).")],
        model: Annotated[str, typer.Option(help="pi-transformer, or a causal model: sasrec+")] = (
            "pi-transformer"
        ),
        data: Annotated[str, typer.Option(help="ml-100k, yoochoose-100k, … or a file")] = (
            "ml-100k"
        ),
        root: Annotated[str | None, typer.Option(help="Folder of raw datasets.")] = None,
        set_: Annotated[
            list[str] | None,
            typer.Option("--set", help="key=value, e.g. stream.replay_streams=2"),
        ] = None,
        resume: Annotated[bool, typer.Option(help="Continue the interrupted run --out.")] = False,
    ) -> None:
        """Predict a time-ordered event stream chunk by chunk, then learn from each chunk."""
        from rich.console import Console

        from attnsvm.rec.stream import StreamConfig, resume_stream, run_stream

        if resume:
            metrics = resume_stream(out, progress=True)
        else:
            base = StreamConfig(model=model).with_settings([f"data.dataset={data}"])
            if root is not None:
                base = base.with_settings([f"data.root={Path(root).resolve()}"])
            metrics = run_stream(base.with_settings(set_ or []), out, progress=True)
        shown = ", ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()
        )
        Console().print(f"{shown}; run: {out}", markup=False, highlight=False)
