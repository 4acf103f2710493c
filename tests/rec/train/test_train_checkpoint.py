"""Checkpoints: safetensors weights, resume state under weights_only, atomic writes, run dirs."""

from __future__ import annotations

import pytest
import torch

from attnsvm.rec.models import build_model
from attnsvm.rec.train.checkpoint import (
    RunDirectory,
    RunDirError,
    finished_run,
    load_resume_state,
    load_weights,
    save_resume_state,
    save_weights,
)


@pytest.mark.parametrize("name", ["sasrec", "gsasrec", "bert4rec"])
def test_weights_round_trip(tmp_path, name):
    source = build_model(name, 20, hidden_size=16, ffn_size=16, max_len=8)
    target = build_model(name, 20, hidden_size=16, ffn_size=16, max_len=8)
    save_weights(source, tmp_path / "model.safetensors")
    load_weights(target, tmp_path / "model.safetensors")
    for key, value in source.state_dict().items():
        assert torch.equal(value, target.state_dict()[key]), key
    seq = torch.tensor([[0, 0, 3, 4, 5]])
    source.eval(), target.eval()
    assert torch.equal(source.score_last(seq), target.score_last(seq))


def test_resume_state_loads_with_weights_only(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    state = {
        "optimizer": optimizer.state_dict(),
        "rng": torch.get_rng_state(),
        "epoch": 3,
        "history": [{"epoch": 1, "valid": {"NDCG@10": 0.5}}],
        "best": float("-inf"),
    }
    save_resume_state(tmp_path / "resume.pt", state)
    loaded = load_resume_state(tmp_path / "resume.pt")  # weights_only=True inside
    assert loaded["epoch"] == 3 and loaded["history"] == state["history"]
    assert torch.equal(loaded["rng"], state["rng"])
    restored = torch.optim.AdamW(model.parameters(), lr=0.1)
    restored.load_state_dict(loaded["optimizer"])
    assert torch.equal(
        restored.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )


def test_run_directory_life_cycle(tmp_path):
    run = RunDirectory.create(tmp_path / "run")
    assert run.work == tmp_path / "run.incomplete" and run.work.is_dir()
    assert not (tmp_path / "run").exists()
    with pytest.raises(RunDirError, match=r"interrupted run is there; continue it with --resume"):
        RunDirectory.create(tmp_path / "run")
    with pytest.raises(RunDirError, match=r"no resumable run state"):
        RunDirectory.for_resume(tmp_path / "run")
    with pytest.raises(RunDirError, match=r"did not finish; continue it with --resume"):
        finished_run(tmp_path / "run")
    for name in ("config.json", "model.json", "id_maps.json", "model.safetensors"):
        (run.work / name).write_text("{}")  # a best checkpoint so far is not a finished run
    with pytest.raises(RunDirError, match=r"run.incomplete: the run did not finish"):
        finished_run(run.work)
    for name in ("config.json", "model.json", "id_maps.json", "model.safetensors"):
        (run.work / name).unlink()
    (run.work / "resume.pt").write_bytes(b"")
    assert RunDirectory.for_resume(tmp_path / "run.incomplete").final == tmp_path / "run"
    assert run.finish() == tmp_path / "run"
    assert not (tmp_path / "run" / "resume.pt").exists()
    with pytest.raises(RunDirError, match=r"already exists"):
        RunDirectory.create(tmp_path / "run")
    with pytest.raises(RunDirError, match=r"this run finished; there is nothing to resume"):
        RunDirectory.for_resume(tmp_path / "run")
    with pytest.raises(RunDirError, match=r"not a run directory \(config.json is missing\)"):
        finished_run(tmp_path / "run")
    with pytest.raises(RunDirError, match=r"no such run directory"):
        finished_run(tmp_path / "elsewhere")
