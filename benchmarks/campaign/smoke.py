"""Every arm not yet made, run end to end at a token size before cells spend an hour on it.

``campaign smoke`` makes each arm that the work folder lacks (for seed 0) in a scratch folder,
with every run the library trains cut to one epoch of ``STEPS`` steps and its validation to at
most ``VALID_USERS`` users: the data, the config, the recipe's stages, the model's first steps
under its objective, the test and the metrics the claims read all run, in minutes. It reports
each arm as made (with the claims' metrics it lacks) or failed (with the error); nothing is
written to the results or the work folder.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from campaign.arms import Arm, Workspace
from campaign.claims import Claim

STEPS = 2
VALID_USERS = 100


@contextmanager
def token_runs() -> Iterator[None]:
    """The library's trainer cut to one epoch of ``STEPS`` steps while the block runs."""
    from attnsvm.rec.train import trainer

    real = trainer.train

    def cut(config, path, *args, **kwargs):
        train = dataclasses.replace(config.train, epochs=1, steps_per_epoch=STEPS)
        users = min(config.eval.valid_users or VALID_USERS, VALID_USERS)
        evaluation = dataclasses.replace(config.eval, valid_users=users)
        small = dataclasses.replace(config, train=train, eval=evaluation)
        return real(small, path, *args, **kwargs)

    trainer.train = cut
    try:
        yield
    finally:
        trainer.train = real


def smoke(
    claims: list[Claim], arms: dict[str, Arm], work: Path, scratch: Path, log=print
) -> dict[str, str]:
    """``{arm key: "ok" | "missing …" | "failed …"}`` for the claims' arms not made in
    ``work``, each made in ``scratch`` at the token size."""
    made, trial = Workspace(work, arms), Workspace(scratch, arms)
    wanted: dict[str, set[str]] = {}
    for claim in claims:
        for key in (claim.system_arm, claim.baseline_arm):
            wanted.setdefault(key, set()).add(claim.metric)
    outcome = {}
    with token_runs():
        for key, metrics in wanted.items():
            if made.done(key, 0):
                continue
            try:
                record = trial.result(key, 0)
            except Exception as error:  # the point: report every arm's failure, go on
                outcome[key] = f"failed: {type(error).__name__}: {error}"
                log(traceback.format_exc())
            else:
                lacking = sorted(metrics - set(record["metrics"]))
                outcome[key] = f"missing {', '.join(lacking)}" if lacking else "ok"
            log(f"{key}: {outcome[key]}")
    return outcome
