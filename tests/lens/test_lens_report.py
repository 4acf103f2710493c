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
    assert "Film number" in page and "http://" not in page and "https://" not in page
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
