"""A run whose weights were damaged after training (NaN, infinity, another dtype) is refused when
it is loaded, in one line naming the file and the tensor, by every command that reads it; the
untouched run keeps working."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from attnsvm.rec.train.checkpoint import WEIGHTS

DAMAGE = {
    "nan": lambda t: t.clone().view(-1).index_fill_(0, torch.tensor([0]), float("nan")).view_as(t),
    "inf": lambda t: t.clone().view(-1).index_fill_(0, torch.tensor([0]), float("inf")).view_as(t),
    "int8": lambda t: t.to(torch.int8),
}


def _damaged_copy(trained: Path, folder: Path, damage: str) -> tuple[Path, str]:
    run = folder / f"run-{damage}"
    shutil.copytree(trained, run)
    tensors = load_file(run / WEIGHTS)
    with safe_open(run / WEIGHTS, "pt") as stored:
        aliases = stored.metadata()  # tied weights are stored once, their other keys here
    key = next(k for k, t in sorted(tensors.items()) if t.is_floating_point() and t.numel() > 1)
    tensors[key] = DAMAGE[damage](tensors[key])
    save_file(tensors, run / WEIGHTS, metadata=aliases)
    return run, key


def _attnsvm(*args: str) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).parent / "attnsvm"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_weights_are_refused_by_recommend_and_evaluate(shared_inputs, tmp_path, damage):
    run, key = _damaged_copy(shared_inputs.trained, tmp_path, damage)
    for args in (("recommend", str(run), "--user", "1", "-k", "3"), ("evaluate", str(run))):
        done = _attnsvm(*args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert str(run / WEIGHTS) in lines[0] and key in lines[0] and "damaged weights" in lines[0]


def test_the_recommender_object_refuses_them_too(shared_inputs, tmp_path) -> None:
    from attnsvm.rec.recommender import Recommender
    from attnsvm.rec.train.checkpoint import RunDirError

    run, key = _damaged_copy(shared_inputs.trained, tmp_path, "nan")
    with pytest.raises(RunDirError, match=re.escape(key) + ".* holds NaN or infinity"):
        Recommender.load(run)
    assert Recommender.load(shared_inputs.trained) is not None  # the untouched run loads
