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
from attnsvm.rec.train.run_lock import RunInUse


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
    # while a process works in it, nothing else may: the lock names the process
    with pytest.raises(RunInUse, match=r"another process is working in this run \(process \d+"):
        RunDirectory.create(tmp_path / "run")
    with pytest.raises(RunInUse):
        RunDirectory.for_resume(tmp_path / "run")
    run.release()
    # interrupted before its config: nothing to resume, and training again reuses the folder
    with pytest.raises(RunDirError, match=r"interrupted before it wrote its config"):
        RunDirectory.for_resume(tmp_path / "run")
    with pytest.raises(RunDirError, match=r"did not finish; continue it with"):
        finished_run(tmp_path / "run")
    run = RunDirectory.create(tmp_path / "run")
    for name in ("config.json", "model.json", "id_maps.json", "model.safetensors"):
        (run.work / name).write_text("{}")  # a best checkpoint so far is not a finished run
    run.release()
    with pytest.raises(RunDirError, match=r"interrupted run is there; continue it with --resume"):
        RunDirectory.create(tmp_path / "run")
    with pytest.raises(RunDirError, match=r"run.incomplete: the run did not finish"):
        finished_run(run.work)
    resumed = RunDirectory.for_resume(tmp_path / "run.incomplete")
    assert resumed.final == tmp_path / "run"
    assert not resumed.resumable and not resumed.complete  # trains from its first epoch
    (run.work / "resume.pt").write_bytes(b"")
    (run.work / ".model.safetensors.abcd1234.tmp.safetensors").write_bytes(b"half")  # a kill
    assert resumed.resumable
    assert resumed.finish() == tmp_path / "run"
    published = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert published == ["config.json", "id_maps.json", "model.json", "model.safetensors"]
    with pytest.raises(RunDirError, match=r"already exists"):
        RunDirectory.create(tmp_path / "run")
    with pytest.raises(RunDirError, match=r"this run finished; there is nothing to resume"):
        RunDirectory.for_resume(tmp_path / "run")
    with pytest.raises(RunDirError, match=r"model.json: damaged \('model' is None\)"):
        finished_run(tmp_path / "run")
    (tmp_path / "run" / "config.json").unlink()
    with pytest.raises(RunDirError, match=r"not a run directory \(config.json is missing\)"):
        finished_run(tmp_path / "run")
    with pytest.raises(RunDirError, match=r"no such run directory"):
        finished_run(tmp_path / "elsewhere")
