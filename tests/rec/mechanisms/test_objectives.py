"""Every model whose config offers a choice of objective takes a trainer step under each: the
forward, the loss on the positions that objective trains, the auxiliary and attack steps and
the optimiser, through ``TrainingLoop.train_step`` (AC-TSR's attack step once fed the last
position alone to the all-position loss, and no test trained that combination)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from test_mechanisms_a import one_step, training_loop, write_events

from attnsvm.rec.models.registry import MODELS

# models whose inputs these events lack: SRT reads item features, SDAT event times, the
# Non-Stationary transformer ratings (its objectives: tests/rec/zoo, tests/rec/models)
NEEDS_OTHER_DATA = {"srt", "sdat", "nstransformer"}
CHOOSING = sorted(
    name
    for name, spec in MODELS.items()
    if "objective" in {f.name for f in dataclasses.fields(spec.config_class)}
    and name not in NEEDS_OTHER_DATA
)


def test_the_models_that_choose_their_objective_are_all_here():
    assert {"actsr", "adamct", "bsarec", "convformer", "matrrec", "ssept"} <= set(CHOOSING)


#: what these tiny networks need besides (d = 8): SSE-PT's user part narrower than d
SIZES = {"ssept": {"user_size": 4}}
#: objectives a model refuses, with the reason its config gives (a leak of the target)
REFUSED = {("adamct", "causal"): "would leak", ("bsarec", "causal"): "would put each target"}


@pytest.mark.parametrize("objective", ["causal", "last"])
@pytest.mark.parametrize("name", CHOOSING)
def test_a_trainer_step_under_each_objective(tmp_path, name, objective):
    data = write_events(tmp_path / "events.txt", 30, 12, 8)
    overrides = {**SIZES.get(name, {}), "objective": objective}
    if (name, objective) in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[name, objective]):
            training_loop(data, name, overrides)
        return
    loop = training_loop(data, name, overrides)
    assert loop.model.objective == objective
    before = [p.detach().clone() for p in loop.model.parameters()]
    assert math.isfinite(one_step(loop))
    moved = [not p.detach().equal(b) for p, b in zip(loop.model.parameters(), before, strict=True)]
    assert any(moved)
