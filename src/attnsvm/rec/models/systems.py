"""Every system the package trains, each with the command that trains it: the registry's models,
presets and baselines (``attnsvm train --model NAME``), and those trained another way — the
staged recipes of BiCAT and MrTransformer, RLT4Rec's episode trainer, the stream-only
PI-Transformer, CRR's offline-RL stage on a finished run, and SAM, an optimizer of any model.
``attnsvm models`` prints this list. Commands name what the user supplies in capitals (DATA,
RUN, …)."""

from __future__ import annotations

from dataclasses import dataclass

from attnsvm.rec.models.registry import catalogue


@dataclass(frozen=True)
class System:
    name: str
    description: str
    commands: tuple[str, ...]  # how to train it, the usual way first


def _train(name: str) -> str:
    return f"attnsvm train --model {name} --data DATA --out RUN"


#: registry names trained by more than (or other than) ``attnsvm train --model NAME`` alone
_OTHER_WAYS: dict[str, tuple[str, ...]] = {
    "bicat": ("attnsvm train --recipe bicat --data DATA --out FOLDER", _train("bicat")),
    "mrtransformer": (
        "attnsvm train --recipe mrtransformer --data DATA --out FOLDER",
        _train("mrtransformer"),
    ),
    "rlt4rec": (
        _train("rlt4rec"),
        "attnsvm rl simulator --data DATA --out SIMULATOR && "
        "attnsvm rl rlt4rec SIMULATOR --out RUN",
    ),
}

#: systems that are no model name of ``attnsvm train``
_OUTSIDE_REGISTRY = (
    System(
        "pi-transformer",
        "streams only: past labels as privileged keys and values over the event stream, "
        "Transformer-XL memory, replay (Bornschein 2024)",
        ("attnsvm stream --model pi-transformer --data DATA --out RUN",),
    ),
    System(
        "crr",
        "offline-RL stage 2 on a finished causal run: Critic-Regularised Regression, twin "
        "critics (Xi 2023)",
        ("attnsvm rl crr STAGE1_RUN --out RUN",),
    ),
    System(
        "sam",
        "sharpness-aware minimisation (SAMRec): an optimizer for any model, not a model",
        (
            "attnsvm train --model MODEL --data DATA --out RUN "
            "--set train.optimizer=sam --set train.sam_rho=0.05",
        ),
    ),
)


def systems() -> list[System]:
    """Every system, sorted by name, each with its commands."""
    registered = [
        System(name, description, _OTHER_WAYS.get(name, (_train(name),)))
        for name, description in catalogue()
    ]
    return sorted([*registered, *_OUTSIDE_REGISTRY], key=lambda system: system.name)
