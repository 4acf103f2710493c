"""The report of a (tiny) run: lens.json, PNGs, a self-contained HTML that Chromium renders."""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.lens.report import write_report
from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.titles import read_titles
from attnsvm.rec.train import AttentionSnapshots, train


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lens_run")
    rng = np.random.default_rng(0)
    lines = [" ".join(map(str, [u, *rng.integers(1, 40, size=8)])) for u in range(1, 61)]
    (folder / "seq.txt").write_text("\n".join(lines) + "\n")
    (folder / "titles.tsv").write_text("".join(f"{i}\tFilm number {i}\n" for i in range(1, 40)))
    config = RunConfig(
        model=ModelChoice(
            "sasrec+", {"num_blocks": 2, "num_heads": 2, "hidden_size": 8, "ffn_size": 8}
        ),
        data=DataConfig(dataset=str(folder / "seq.txt"), max_len=6),
        train=TrainConfig(epochs=2, batch_size=32, seed=0),
        eval=EvalConfig(ks=(10,)),
    )
    return train(
        config, folder / "run", callbacks=[AttentionSnapshots()], show_progress=False
    ).run_dir, folder


def test_report_has_every_part(tiny_run):
    run_dir, folder = tiny_run
    report = write_report(
        run_dir, folder / "lens", sequences=12, titles=folder / "titles.tsv", progress=False
    )
    lens = json.loads((report.parent / "lens.json").read_text())
    assert lens["sequences"] == 12 and len(lens["heads"]) == 4  # 2 layers × 2 heads
    for head in lens["heads"]:
        assert set(head["scores"]) == {"linear", "counterfactual"}
        assert sum(head["scores"]["linear"]["classes"].values()) == 12
        # snapshots up to the epoch whose weights the lens reads (the best of the two)
        assert [row["epoch"] for row in head["epochs"]] == list(range(lens["checkpoint_epoch"] + 1))
        for norm in ("frobenius", "nuclear"):
            solution = head["svm"]["selected"][norm]
            assert solution["kind"] in ("hard", "soft")
            assert -1.0 <= solution["correlation"] <= 1.0
    page = report.read_text()
    assert "Film number" in page
    # nothing is fetched: every resource is inline (the paper is a link the reader may follow)
    links = re.findall(r"(?:src|href)='([^']*)'", page)
    assert all(link.startswith(("data:", "https://arxiv.org/")) for link in links), links
    assert "<link" not in page and "<script src" not in page
    # the page explains itself: which run, every term, a caption per figure
    assert "How to read this report" in page and "NDCG@10" in page
    assert page.count("<figcaption>") == 4 * 4 and "W^mm_F" in page
    images = re.findall(r"src='data:image/png;base64,", page)
    assert len(images) == len(list(report.parent.glob("*.png"))) == 4 * 4
    assert not list(report.parent.glob(".*tmp"))  # nothing half-written left behind


def test_cli_writes_the_report_and_prints_its_path(tiny_run):
    run_dir, folder = tiny_run
    result = CliRunner().invoke(
        app,
        [
            "lens",
            str(run_dir),
            "--sequences",
            "5",
            "--layer",
            "1",
            "--head",
            "0",
            "--out",
            str(folder / "cli"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("report.html")
    assert len(json.loads((folder / "cli" / "lens.json").read_text())["heads"]) == 1
    bad = CliRunner().invoke(app, ["lens", str(run_dir), "--layer", "7"])
    assert bad.exit_code == 1 and "layer 7 does not exist" in bad.output


def test_bad_titles_file_names_file_and_line(tmp_path):
    path = tmp_path / "movies.dat"
    path.write_text("1::Toy Story (1995)::Animation\nbroken line\n")
    with pytest.raises(DataFormatError, match=r"movies\.dat:2"):
        read_titles(path)


def test_report_renders_in_headless_chromium(tiny_run, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    run_dir, _ = tiny_run
    report = write_report(run_dir, tmp_path / "lens", sequences=8, progress=False)
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1200,2000",
            f"--screenshot={shot}",
            report.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    assert pixels.std() > 0.05  # not a blank page: text, tables and plots
    dark = (pixels.mean(axis=-1) < 0.5).mean()
    assert 0.001 < dark < 0.5


ZOO_ATTENTION = {
    "bert4rec": {},
    "bsarec": {},
    "ssept": {"user_size": 4},
    "actsr": {},
    "adamct": {"se_ratio": 2},
    "matrrec": {"state_size": 4},
}


@pytest.mark.parametrize("name", list(ZOO_ATTENTION))
def test_report_runs_on_every_attention_model_of_the_zoo(name, tiny_run, tmp_path):
    """Counterfactual scores for all of them (a whole re-run where the last-position shortcut
    does not apply); linear scores where the blocks are a TransformerEncoder's."""
    _, folder = tiny_run
    size = {"hidden_size": 8, "ffn_size": 8, "num_heads": 2, **ZOO_ATTENTION[name]}
    config = RunConfig(
        model=ModelChoice(name, size),
        data=DataConfig(dataset=str(folder / "seq.txt"), max_len=6),
        train=TrainConfig(epochs=1, batch_size=32, seed=0),
        eval=EvalConfig(ks=(10,)),
    )
    run_dir = train(config, tmp_path / "run", show_progress=False).run_dir
    report = write_report(run_dir, tmp_path / "lens", sequences=6, progress=False)
    lens = json.loads((report.parent / "lens.json").read_text())
    assert lens["model"] == name and lens["heads"]
    linear = name in ("bert4rec", "ssept")  # their blocks are a TransformerEncoder's
    assert lens["score_kinds"] == (["linear", "counterfactual"] if linear else ["counterfactual"])
    for head in lens["heads"]:
        assert sum(head["scores"]["counterfactual"]["classes"].values()) == 6


def test_the_report_on_planted_data_says_how_often_the_trigger_is_selected(tmp_path):
    """On the built-in planted data the report states the trigger's recovery rate, and it is the
    rate a direct count from the generator's ground truth gives."""
    import torch

    from attnsvm.rec.data.synthetic import builtin_planted
    from attnsvm.rec.train import train

    torch.set_num_threads(1)
    model = {"hidden_size": 16, "ffn_size": 16, "num_blocks": 1, "dropout": 0.0}
    config = RunConfig(
        model=ModelChoice("sasrec+", model | {"attention_dropout": 0.0}),
        data=DataConfig(dataset="synthetic", max_len=20),
        train=TrainConfig(epochs=2, batch_size=64, lr=3e-3, keep="last", steps_per_epoch=5),
        eval=EvalConfig(ks=(1, 10)),
    )
    run_dir = train(config, tmp_path / "run", show_progress=False).run_dir
    report = write_report(run_dir, tmp_path / "lens", sequences=30, progress=False)
    lens = json.loads((report.parent / "lens.json").read_text())
    data, truth = builtin_planted()
    users = np.array(lens["users"])
    selected = np.array(lens["heads"][0]["per_sequence"]["selected"])
    history = data.to_sequences()
    # a window of 20 holds the 19-item test history from column 1
    chosen = np.array([history.row(u)[p - 1] for u, p in zip(users, selected, strict=True)])
    planted = truth.planted[users]
    expected = float(np.mean(chosen[planted] == truth.trigger_item[users][planted]))
    assert lens["planted_trigger_recovery"] == {"L0H0": pytest.approx(expected)}
    assert "Planted trigger" in report.read_text()
