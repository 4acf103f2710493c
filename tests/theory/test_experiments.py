"""The acceptance criteria of theory.md §3.1-§3.6 at CI-sized seed counts (full: benchmarks/)."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.theory.experiments import (
    EXPERIMENTS,
    demo_summary,
    global_path,
    local_convergence,
    multi_token,
    overparameterization,
    rank,
    regularization_path,
    run_experiment,
)


@pytest.fixture(scope="module")
def local():
    return local_convergence.run(20)


def test_global_path_section_3_1_and_3_2():
    result = global_path.run()
    for name in ("visualization1", "visualization2"):
        m = result.metrics[name]
        assert m["corr_W_fro"] >= 0.999 and m["corr_KQ_nuc"] >= 0.999
        np.testing.assert_array_equal(m["selected_W"], m["opt"])
        np.testing.assert_array_equal(m["selected_KQ"], m["opt"])
    m1 = result.metrics["visualization1"]
    assert m1["corr_W_nuc"] <= 0.95 and m1["corr_KQ_fro"] <= 0.95
    np.testing.assert_array_equal(m1["opt"], [0, 2])
    assert m1["min_cos_Wz_to_Wmm_z"] >= 0.999
    assert result.passed


def test_local_convergence_section_3_3(local):
    final = local.metrics["final"]
    assert final["W_fro"]["median"] >= 0.99 and final["W_fro"]["p10"] >= 0.98  # (a)
    assert final["KQ_nuc"]["median"] >= 0.99 and final["KQ_nuc"]["p10"] >= 0.98  # (b)
    assert final["W_nuc"]["median"] <= 0.95 and final["KQ_fro"]["median"] <= 0.95  # (c)
    assert local.metrics["max_prob"]["W"]["500"] >= 0.99  # (d)
    assert local.metrics["max_prob"]["KQ"]["100"] >= 0.99
    assert local.metrics["at_1000"]["W_fro"]["median"] >= 0.98  # (e)
    assert local.metrics["rank_fro_mean"] == 6.0  # rank(W^mm_F,alpha) = n in every run
    assert sum(local.metrics["infeasible_selections"].values()) == 0
    assert local.passed


def test_local_convergence_says_how_it_differs_from_the_notebook(local, tmp_path):
    paths = local.save(tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert any("idx=0" in note for note in saved["notes"])
    assert saved["config"]["seeds"] == 20 and saved["metrics"]["final"]["W_fro"]["count"] == 20
    assert (tmp_path / "local_convergence.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)


def test_rank_section_3_5_accurate_mode():
    result = rank.run(20, dims=(2, 4, 10), cells=((5, 5),), notebook=False)
    cells = result.metrics["accurate"]["n=5,T=5"]
    for d in (4, 10):
        assert cells[d]["rank_fro"] >= 0.95 * min(5, d)  # (a)
        assert cells[d]["max_rank_nuc"] <= 5  # (b)
        assert cells[d]["rank_nuc"] < cells[d]["rank_fro"]  # (c)
        assert 2.0 <= cells[d]["rank_nuc"] <= 3.2
    assert cells[2]["feasible"] == 20 and cells[2]["tried"] > 20  # infeasible ones skipped
    assert result.passed


def test_rank_notebook_mode_reproduces_the_artefacts():
    result = rank.run(8, dims=(1, 10), cells=((5, 5),))
    notebook = result.metrics["notebook"]["n=5,T=5"]
    accurate = result.metrics["accurate"]["n=5,T=5"]
    assert notebook[1] == {"infeasible": 8, "rank_fro": 1.0, "rank_nuc": 1.0}  # None -> rank 1
    assert accurate[1]["feasible"] == 0 and accurate[1]["rank_fro"] is None
    assert notebook[10]["rank_nuc"] > accurate[10]["rank_nuc"]  # SCS inflates the rank
    assert notebook[10]["rank_fro"] == 5.0


def test_multi_token_section_3_4():
    result = multi_token.run(20, dims=(4, 10))
    d10 = result.metrics["by_d"][10]
    f = d10["final_one_minus_corr"]
    assert d10["accepted"] == 20 and d10["tried"] > 200  # acceptance is rare at d = 10
    assert f["svmeq"]["mean"] <= 0.01 and f["svmeq"]["median"] <= 5e-3
    assert f["one_token"]["mean"] >= 0.05
    assert f["svmeq"]["mean"] <= f["dir"]["mean"] < f["one_token"]["mean"]
    f4 = result.metrics["by_d"][4]["final_one_minus_corr"]
    assert f4["svmeq"]["median"] <= 0.03 and f4["svmeq"]["mean"] <= 0.08
    assert f4["svmeq"]["median"] < f4["dir"]["median"] < f4["one_token"]["median"]
    rejected = d10["rejected"]
    assert sum(rejected.values()) + d10["accepted"] == d10["tried"]
    assert result.passed


def test_overparameterization_section_3_6():
    result = overparameterization.run(30, dims=(4, 20))
    rows = result.metrics["by_d"]
    g4, g20 = rows[4]["W"]["frac_global"], rows[20]["W"]["frac_global"]
    assert g20 - g4 >= 0.2 and 0.6 <= g20 <= 1.0 and 0.2 <= g4 <= 0.65
    for d in (4, 20):
        assert rows[d]["W"]["frac_locally_optimal_fro"] >= 0.85
        assert rows[d]["W"]["corr_own_svm"]["p10"] >= 0.98
    assert result.passed


def test_regularization_path_approaches_the_svms():
    result = regularization_path.run(6, restarts=4, steps=400)
    w, kq = result.metrics["W"], result.metrics["KQ"]
    assert w["corr_fro_median"][-1] >= 0.99
    assert np.all(np.diff(w["corr_fro_median"]) > -1e-3)  # grows with R
    assert kq["corr_nuc_median"][-1] > kq["corr_fro_median"][-1]
    assert kq["corr_nuc_median"][-1] > kq["corr_nuc_median"][0] + 0.3


def test_registry_rejects_bad_names_and_counts():
    with pytest.raises(ValueError, match="unknown experiment 'nope'"):
        run_experiment("nope")
    with pytest.raises(ValueError, match="seeds"):
        run_experiment("local-convergence", 0)
    assert set(EXPERIMENTS) == {
        "global-path",
        "local-convergence",
        "rank",
        "multi-token",
        "overparameterization",
        "regularization-path",
    }


def test_cli_run_writes_results_and_prints_the_notes(tmp_path):
    runner = CliRunner()
    listed = runner.invoke(app, ["theory", "list"])
    assert listed.exit_code == 0 and "multi-token" in listed.output
    out = tmp_path / "gp"
    ran = runner.invoke(app, ["theory", "run", "global-path", "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    assert "pass" in ran.output and "notebook" in ran.output
    assert json.loads((out / "results.json").read_text())["experiment"] == "global-path"
    assert (out / "global_path.png").exists()
    bad = runner.invoke(app, ["theory", "run", "nope"])
    assert bad.exit_code != 0 and "unknown experiment" in bad.output


@pytest.mark.slow
def test_demo_summary_runs_everything(tmp_path):
    table = demo_summary(tmp_path)
    assert table.row_count == len(EXPERIMENTS)
    assert all((tmp_path / name / "results.json").exists() for name in EXPERIMENTS)


@pytest.mark.slow
def test_local_convergence_full_size_including_the_alpha_opt_fraction():
    result = local_convergence.run(100)
    assert 0.45 <= result.metrics["frac_alpha_opt"]["W"] <= 0.95  # (f), needs 100 seeds
    assert result.passed
