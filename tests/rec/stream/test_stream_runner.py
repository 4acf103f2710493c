"""The prequential runner: predict before update, resume equality, metrics by hand, the config's
round trip, and the command line."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from stream_helpers import write_clicks
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.config_base import ConfigError
from attnsvm.rec.stream import StreamConfig, resume_stream, run_stream
from attnsvm.rec.stream.learner import score_chunk
from attnsvm.rec.stream.runner import Prequential

TINY = ["model.hidden_size=16", "model.ffn_size=16", "model.context_blocks=1"]


def config(clicks, *settings: str, model: str = "pi-transformer") -> StreamConfig:
    tiny = TINY if model == "pi-transformer" else TINY[:2]
    base = [f"data.dataset={clicks}", "stream.chunk_size=16", "stream.history=4", *tiny]
    return StreamConfig(model=model).with_settings([*base, "stream.log_every=5", *settings])


def digest(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("model", ["pi-transformer", "sasrec+"])
def test_every_chunk_is_predicted_with_the_parameters_before_its_own_update(
    tmp_path, monkeypatch, model
):
    calls = []
    predict, update = Prequential.predict_chunk, Prequential.update_chunk

    def recorded_predict(self, index):
        calls.append(("predict", index, digest(self.model)))
        return predict(self, index)

    def recorded_update(self, index):
        loss = update(self, index)
        calls.append(("update", index, digest(self.model)))
        return loss

    monkeypatch.setattr(Prequential, "predict_chunk", recorded_predict)
    monkeypatch.setattr(Prequential, "update_chunk", recorded_update)
    clicks = write_clicks(tmp_path / "clicks.txt")
    run_stream(config(clicks, "stream.replay_streams=2", model=model), tmp_path / "run")
    chunks = math.ceil(320 / 16)
    assert [(kind, index) for kind, index, _ in calls] == [
        (kind, index) for index in range(chunks) for kind in ("predict", "update")
    ]
    for index in range(1, chunks):
        used, after_previous = calls[2 * index][2], calls[2 * index - 1][2]
        assert all(torch.equal(a, b) for a, b in zip(used, after_previous, strict=True))
        before = calls[2 * index - 2][2]  # every update changes them
        assert not all(torch.equal(a, b) for a, b in zip(before, after_previous, strict=True))


def without_timing(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("seconds", "events_per_second")}


def test_a_resumed_run_gives_the_numbers_of_an_uninterrupted_one(tmp_path):
    clicks = write_clicks(tmp_path / "clicks.txt")
    settings = config(clicks, "stream.replay_streams=2", "stream.save_every=3")
    whole = run_stream(settings, tmp_path / "whole")
    assert run_stream(settings, tmp_path / "cut", stop_after=7) is None
    assert (tmp_path / "cut.incomplete" / "resume.pt").is_file()
    assert resume_stream(tmp_path / "cut", stop_after=13) is None
    resumed = resume_stream(tmp_path / "cut")
    assert without_timing(resumed) == without_timing(whole)
    logs = [
        [without_timing(json.loads(line)) for line in (tmp_path / run / "log.jsonl").open()]
        for run in ("whole", "cut")
    ]
    assert logs[0] == logs[1] and len(logs[0]) == 4
    weights = [load_file(tmp_path / run / "model.safetensors") for run in ("whole", "cut")]
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
    assert not (tmp_path / "cut" / "resume.pt").exists()
    saved = json.loads((tmp_path / "cut" / "config.json").read_text())
    assert StreamConfig.from_dict(saved) == settings


def test_learning_from_the_stream_beats_a_model_that_never_learns(tmp_path):
    clicks = write_clicks(tmp_path / "clicks.txt", sessions=120)
    learned = run_stream(config(clicks, "stream.lr=0.01"), tmp_path / "learned")
    frozen = run_stream(config(clicks, "stream.lr=1e-12"), tmp_path / "frozen")
    assert learned["HR@10"] > frozen["HR@10"] + 0.2
    assert learned["log_loss"] < frozen["log_loss"] - 0.5


def test_metrics_of_a_chunk_by_hand():
    logits = torch.tensor(
        [
            [-math.inf, 3.0, 1.0, 2.0, 0.0],  # target 3: rank 2 (0-based 1)
            [-math.inf, 1.0, 1.0, 1.0, 1.0],  # target 2: tie, lower ids first: 0-based 1
            [-math.inf, 0.0, 5.0, 1.0, 9.0],  # target 1, but item 4 is not a candidate
            [-math.inf, 0.0, 0.0, 0.0, 0.0],  # target 4: not a candidate (new): a miss
        ]
    )
    targets = torch.tensor([3, 2, 1, 4])
    candidates = torch.tensor([False, True, True, True, False])
    totals = score_chunk(logits, targets, candidates, k=2)
    log_softmax = logits.log_softmax(1)
    expected_loss = -sum(float(log_softmax[i, t]) for i, t in enumerate(targets.tolist()))
    assert totals.events == 4 and totals.new_items == 1
    assert totals.log_loss == pytest.approx(expected_loss, rel=1e-6)
    assert totals.hits == 2  # rows 0 and 1 at 0-based rank 1; row 2 at rank 2 (items 2, 3)
    assert totals.ndcg == pytest.approx(2 / math.log2(3))
    everything = score_chunk(logits, targets, None, k=2)
    assert everything.new_items == 0 and everything.hits == 2


def test_the_config_round_trips_and_refuses_bad_settings(tmp_path):
    settings = StreamConfig().with_settings(
        ["model.hidden_size=32", "stream.replay_streams=3", "data.dataset=yoochoose-100k"]
    )
    assert StreamConfig.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings
    assert settings.model_config() == {"hidden_size": 32, "max_len": 50}
    for bad, message in [
        ("stream.chunk_size=0", "chunk_size"),
        ("stream.lr=nan", "finite"),
        ("stream.rank_over=future", "rank_over"),
        ("stream.colour=red", "unknown key 'stream.colour'"),
        ("model.max_len=9", "stream.history"),
        ("model=bert4rec", None),
    ]:
        if message is None:  # a registry model the stream cannot score from a history alone
            clicks = write_clicks(tmp_path / "clicks.txt")
            with pytest.raises(ConfigError, match="cannot run on a stream"):
                run_stream(config(clicks, bad, model="sasrec+"), tmp_path / "b")
            continue
        with pytest.raises(ConfigError, match=message):
            StreamConfig().with_settings([bad])


def test_the_command_line_runs_a_stream_and_fails_in_one_line(tmp_path):
    clicks = write_clicks(tmp_path / "clicks.txt")
    runner = CliRunner()
    sets = [arg for s in ["stream.chunk_size=64", *TINY[:2]] for arg in ("--set", s)]
    command = ["stream", "--data", str(clicks), "--model", "sasrec+", "--out", str(tmp_path / "r")]
    result = runner.invoke(app, [*command, *sets])
    assert result.exit_code == 0, result.output
    assert "HR@10" in result.output and (tmp_path / "r" / "metrics.json").is_file()
    result = runner.invoke(app, [*command, "--set", "stream.k=0"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "k" in lines[0], result.output
    empty = tmp_path / "empty.txt"
    empty.write_text("SessionId\tItemId\tTime\n")
    result = runner.invoke(app, ["stream", "--data", str(empty), "--out", str(tmp_path / "e")])
    assert result.exit_code == 1 and result.output.startswith("error: "), result.output
