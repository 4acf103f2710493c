"""The reproduction campaign (``benchmarks/campaign``) on tiny cells: verdicts that cannot
certify noise, cells that run once, arms shared and cached, a scheduler that keeps its budget."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from scipy import stats

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from campaign import claims as claims_module  # noqa: E402
from campaign import report, runner  # noqa: E402
from campaign.arms import Arm, Outcome  # noqa: E402
from campaign.claims import Claim, compare_seeds  # noqa: E402


def test_verdict_needs_three_seeds_and_an_interval_clear_of_zero() -> None:
    clear = compare_seeds([1.10, 1.11, 1.12], [1.0, 1.0, 1.0])
    assert clear.verdict == "supported" and clear.better == 3
    assert compare_seeds([1.10, 1.11], [1.0, 1.0]).verdict == "not shown"  # two seeds
    # the p = 0.78 kind of "success": a mean on the right side, an interval across zero
    noisy = compare_seeds([1.05, 0.97, 1.01], [1.0, 1.0, 1.0])
    assert noisy.relative > 0 and noisy.low < 0 < noisy.high
    assert noisy.verdict == "not shown"
    assert compare_seeds([0.90, 0.89, 0.91], [1.0, 1.0, 1.0]).verdict == "contradicted"


def test_interval_is_the_t_interval_of_the_relative_differences() -> None:
    system, baseline = [0.31, 0.29, 0.33, 0.30], [0.28, 0.285, 0.30, 0.27]
    relative = [(s - b) / b for s, b in zip(system, baseline, strict=True)]
    mean = sum(relative) / 4
    sem = stats.sem(relative)
    low, high = stats.t.interval(0.95, 3, loc=mean, scale=sem)
    result = compare_seeds(system, baseline)
    assert math.isclose(result.relative, mean, rel_tol=1e-12)
    assert math.isclose(result.low, low, rel_tol=1e-9)
    assert math.isclose(result.high, high, rel_tol=1e-9)


def test_absolute_differences_where_the_baseline_can_be_zero() -> None:
    """A rate whose baseline is 0 has no relative difference; in points it has a verdict."""
    assert math.isnan(compare_seeds([0.04, 0.05, 0.03], [0.0, 0.0, 0.0]).relative)
    points = compare_seeds([0.04, 0.05, 0.03], [0.0, 0.01, 0.0], absolute=True)
    assert points.relative == pytest.approx(0.11 / 3) and points.verdict == "supported"


def test_direction_and_margin() -> None:
    lower_is_better = compare_seeds([0.60, 0.61, 0.59], [0.65, 0.65, 0.65], direction=-1)
    assert lower_is_better.verdict == "supported" and lower_is_better.better == 3
    # 2 % worse, tightly: not an improvement, but within a 5 % non-inferiority margin
    worse = [0.980, 0.981, 0.979]
    assert compare_seeds(worse, [1.0] * 3).verdict == "contradicted"
    assert compare_seeds(worse, [1.0] * 3, margin=0.05).verdict == "supported"
    assert compare_seeds([0.90, 0.91, 0.89], [1.0] * 3, margin=0.05).verdict == "contradicted"


def test_a_cell_over_the_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="90"):
        Claim(
            "big", "x", "c", "d", "p", "a", "b", "m", minutes=claims_module.CELL_LIMIT_MINUTES + 1
        )


def _arms(calls: list[str]) -> dict[str, Arm]:
    def arm(key: str, value: float, needs: tuple[str, ...] = ()) -> Arm:
        def make(seed: int, space) -> Outcome:
            for need in needs:
                space.result(need, seed)
            calls.append(f"{key}-{seed}")
            return Outcome({"NDCG@10": value + seed / 100, "NDCG@5": 0.0}, 3)

        return Arm(key, "tiny", make, needs=needs)

    return {a.key: a for a in (arm("base", 0.1), arm("stage1", 0.2), arm("sys", 0.3, ("stage1",)))}


def _claim(**changes) -> Claim:
    fields = dict(
        id="tiny-claim",
        system="tiny",
        claim="c",
        dataset="d",
        protocol="p",
        system_arm="sys",
        baseline_arm="base",
        metric="NDCG@10",
        minutes=1,
    )
    return Claim(**{**fields, **changes})


def test_a_cell_writes_its_rows_once_and_shares_cached_arms(tmp_path: Path) -> None:
    calls: list[str] = []
    arms, results = _arms(calls), tmp_path / "campaign.csv"
    rows = runner.run_cell(_claim(), 0, arms, tmp_path / "work", results)
    assert sorted(calls) == ["base-0", "stage1-0", "sys-0"]
    assert {(r["arm"], r["role"], r["metric"]) for r in rows} == {
        ("base", "baseline", "NDCG@10"),
        ("sys", "system", "NDCG@10"),
    }  # NDCG@5 is not a reported cut-off
    assert runner.run_cell(_claim(), 0, arms, tmp_path / "work", results) == []
    # a second claim over the same arms trains nothing again
    runner.run_cell(_claim(id="other"), 0, arms, tmp_path / "work", results)
    assert len(calls) == 3
    written = list(csv.DictReader(results.open()))
    assert len(written) == 4 and set(written[0]) == set(runner.COLUMNS)
    assert all(float(r["cpu_seconds"]) >= 0 and r["epochs"] == "3" for r in written)


def test_pending_cells_by_priority_then_cost_without_finished_ones(tmp_path: Path) -> None:
    arms, results = _arms([]), tmp_path / "campaign.csv"
    claims = [
        _claim(id="dear", minutes=50, priority=1, seeds=(0,)),
        _claim(id="cheap", minutes=5, priority=1, seeds=(0, 1)),
        _claim(id="first", minutes=80, priority=0, seeds=(0,)),
        _claim(id="led", minutes=1, priority=2, lead=1, seeds=(3, 4)),
    ]
    runner.run_cell(claims[1], 0, arms, tmp_path / "work", results)
    cells = runner.pending(claims, arms, results)
    names = ["first-seed0", "led-seed3", "cheap-seed1", "dear-seed0", "led-seed4"]
    assert [c.name() for c in cells] == names
    assert cells[0].arms == ("base", "stage1", "sys")  # the dependency counts as the cell's


def test_cells_of_other_seeds_run_beside_each_other_but_not_over_a_shared_arm() -> None:
    cell = runner.Cell
    running = [cell("c", 0, 1, 0, ("base", "sys"))]
    candidates = [
        cell("c", 1, 1, 0, ("base", "sys")),  # the same arms, another seed: its own folders
        cell("d", 0, 1, 0, ("base", "other")),  # seed 0's base is being trained
        cell("e", 0, 1, 0, ("other",)),
    ]
    assert [c.name() for c in runner.beside(candidates, running)] == ["c-seed1", "e-seed0"]


def test_a_cells_estimate_shrinks_with_the_arms_already_made(tmp_path: Path) -> None:
    """Read against the work folder, a cell whose arms another claim made is estimated at the
    minute its rows take, one with a share of them made at that share of its claim's."""
    arms, results, work = _arms([]), tmp_path / "campaign.csv", tmp_path / "work"
    claims = [
        _claim(id="made", minutes=60, seeds=(0, 1)),
        _claim(id="half", minutes=60, baseline_arm="stage1", seeds=(0,)),
    ]
    assert [c.minutes for c in runner.pending(claims, arms, results, work)] == [60, 60, 60]
    runner.run_cell(_claim(id="first"), 0, arms, work, results)  # base, stage1, sys for seed 0
    minutes = {c.name(): c.minutes for c in runner.pending(claims, arms, results, work)}
    # seed 1's arms are estimated at what seed 0's cost (a few CPU-ms: the minute its rows take)
    assert minutes == {"made-seed0": 1.0, "half-seed0": 1.0, "made-seed1": 1.0}
    (work / "arms" / "sys" / "seed0.json").unlink()
    no_rows = tmp_path / "none.csv"  # the work folder alone: no results recorded the arms
    minutes = {c.name(): c.minutes for c in runner.pending(claims, arms, no_rows, work)}
    assert minutes == {"made-seed0": 20.0, "half-seed0": 30.0, "made-seed1": 20.0}
    # the results recorded it: made, however the work folder lost it
    minutes = {c.name(): c.minutes for c in runner.pending(claims, arms, results, work)}
    assert minutes == {"made-seed0": 1.0, "half-seed0": 1.0, "made-seed1": 1.0}
    assert [c.minutes for c in runner.pending(claims, arms, results)] == [60, 60, 60]


def test_a_new_machine_reads_the_arms_the_results_recorded_and_trains_only_what_it_must(
    tmp_path: Path, monkeypatch
) -> None:
    """A work folder lost with its machine: an arm a finished cell recorded is compared again
    from its rows (values, epochs, CPU and the commit it ran), not trained again; an arm whose
    run another arm starts from is made again, and so is one whose rows lack the metric."""
    calls: list[str] = []
    arms, results = _arms(calls), tmp_path / "campaign.csv"
    monkeypatch.setattr(runner, "code_version", lambda: "old")
    first = runner.run_cell(_claim(id="first"), 0, arms, tmp_path / "lost", results)
    assert sorted(calls) == ["base-0", "stage1-0", "sys-0"]
    monkeypatch.setattr(runner, "code_version", lambda: "new")
    work = tmp_path / "new-machine"
    again = runner.run_cell(_claim(id="again"), 0, arms, work, results)
    assert len(calls) == 3
    fields = ("arm", "role", "metric", "value", "epochs", "cpu_seconds", "commit")
    assert [[r[f] for f in fields] for r in again] == [[r[f] for f in fields] for r in first]
    assert all(r["commit"] == "old" for r in again)
    # seed 2: stage1 recorded (a claim on it), sys not; sys starts from stage1's run
    runner.run_cell(
        _claim(id="on-stage1", system_arm="stage1"), 2, arms, tmp_path / "lost", results
    )
    calls.clear()
    runner.run_cell(_claim(id="first"), 2, arms, work, results)
    assert calls == ["stage1-2", "sys-2"]
    # a metric the rows do not keep (NDCG@5 is reported only by a claim on it): trained again
    calls.clear()
    runner.run_cell(_claim(id="at-5", metric="NDCG@5"), 0, arms, work, results)
    assert sorted(calls) == ["base-0", "stage1-0", "sys-0"]


def test_estimates_count_recorded_arms_as_made_but_not_the_runs_still_needed(tmp_path: Path):
    """Against results written on another machine: a recorded arm costs nothing, an unmade one
    its measured mean, and a recorded arm whose run an unmade one starts from costs its mean."""
    results = tmp_path / "campaign.csv"
    with results.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=runner.COLUMNS)
        writer.writeheader()
        for arm, seed, seconds in [
            ("base", 0, 600), ("stage1", 0, 1200), ("sys", 0, 2400), ("base", 2, 600),
            ("stage1", 2, 1200),
        ]:  # fmt: skip
            row = dict.fromkeys(runner.COLUMNS, "")
            row.update(arm=arm, seed=seed, metric="NDCG@10", value="0.1", epochs=3)
            writer.writerow({**row, "cpu_seconds": seconds, "system": "tiny", "commit": "c"})
    claim, work = _claim(id="first", minutes=60, seeds=(2,)), tmp_path / "new-machine"
    space = runner.Workspace(work, _arms([]), results)
    left = runner._minutes_left(space, claim, 2, ("base", "stage1", "sys"))
    assert left == {"base": 0.0, "stage1": 20.0, "sys": 40.0}
    assert [c.minutes for c in runner.pending([claim], _arms([]), results, work)] == [60.0]


def test_a_cells_estimate_is_its_arms_measured_cost_less_what_it_spent(tmp_path: Path) -> None:
    """An arm another seed made is estimated at its mean measured cost, not at a share of the
    claim's; the CPU a stopped cell already gave it (its slices) is taken off."""
    arms, results, work = _arms([]), tmp_path / "campaign.csv", tmp_path / "work"
    claim = _claim(id="c", minutes=60, seeds=(2,))
    for key, seed, seconds in [("sys", 0, 3000), ("sys", 1, 3600), ("base", 0, 600)]:
        record = work / "arms" / key / f"seed{seed}.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"cpu_seconds": seconds}))
    # sys 55 (mean of 50 and 60), base 10, stage1 unmeasured: 60 / 3
    assert [c.minutes for c in runner.pending([claim], arms, results, work)] == [85.0]
    (work / "arms" / "sys" / "seed2.slices").write_text("1800.0\n")
    assert [c.minutes for c in runner.pending([claim], arms, results, work)] == [55.0]
    (work / "arms" / "sys" / "seed2.slices").write_text("9000.0\n")  # past its mean: none left
    assert [c.minutes for c in runner.pending([claim], arms, results, work)] == [30.0]
    # a twin claim over the same arms adds a cell but no minute to the total
    twin = _claim(id="twin", minutes=60, seeds=(2,))
    assert len(runner.pending([claim, twin], arms, results, work)) == 2
    assert runner.pending_total([claim, twin], arms, results, work) == 30.0


def test_claims_out_of_reach_are_not_scheduled_unless_named() -> None:
    claims = [_claim(id="near"), _claim(id="far", out_of_reach="≈ 131 CPU-hours")]
    assert [c.id for c in runner.schedulable(claims, named=False)] == ["near"]
    assert [c.id for c in runner.schedulable(claims, named=True)] == ["near", "far"]


def test_a_run_stopped_before_its_first_epoch_starts_afresh(tmp_path: Path, monkeypatch) -> None:
    """A run that failed at its first step leaves a partial folder with no resume point: the
    arm's next attempt removes it and trains from the start; one with a resume point resumes."""
    from attnsvm.rec.train import trainer
    from attnsvm.rec.train.checkpoint import RunDirectory
    from campaign.arms import train_run

    calls = []
    monkeypatch.setattr(trainer, "train", lambda *args, resume, **kw: calls.append(resume))
    run = tmp_path / "run"
    partial = RunDirectory(run).partial
    partial.mkdir()
    (partial / "config.json").write_text("{}")
    train_run(None, run)
    assert calls == [False] and not partial.exists()
    partial.mkdir()
    (partial / "resume.pt").write_bytes(b"")
    train_run(None, run)
    assert calls == [False, True] and (partial / "resume.pt").exists()


def test_a_runs_labelled_sampled_metrics_are_read_and_reported_by_their_base_name(tmp_path):
    """BiCAT's claims read ``NDCG@10 (sampled: 100 uniform)``: the trainer writes it under
    ``test_sampled``, beside the full-ranking ``test``; the CSV skips the same cut-offs in both."""
    from campaign.arms import read_run

    sampled = {"NDCG@10 (sampled: 100 uniform)": 0.4, "NDCG@5 (sampled: 100 uniform)": 0.3}
    metrics = {"test": {"NDCG@10": 0.1, "HR@1": 0.0}, "test_sampled": sampled, "epochs": 4}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    outcome = read_run(tmp_path)
    assert outcome.metrics == {**metrics["test"], **sampled} and outcome.epochs == 4
    reported = [name for name in outcome.metrics if not runner.UNREPORTED.match(name)]
    assert reported == ["NDCG@10", "NDCG@10 (sampled: 100 uniform)"]


def test_smoke_makes_each_unmade_arm_in_scratch_and_reports_failures(tmp_path, monkeypatch):
    """``campaign smoke``: arms the work folder lacks are made in the scratch folder (the work
    folder and the results untouched), a failing arm is reported and the others still run, and
    an arm without a claim's metric says which; the library's runs are cut to 2 steps."""
    from attnsvm.rec.train import trainer
    from campaign import smoke

    calls: list[str] = []
    arms = _arms(calls)
    arms["broken"] = Arm("broken", "tiny", lambda seed, space: 1 / 0)
    work, scratch = tmp_path / "work", tmp_path / "scratch"
    runner.run_cell(_claim(), 0, arms, work, tmp_path / "campaign.csv")  # base, stage1, sys
    (work / "arms" / "sys" / "seed0.json").unlink()
    claims = [
        _claim(),
        _claim(id="other", baseline_arm="broken"),
        _claim(id="recall", metric="Recall@10"),
    ]
    outcome = smoke.smoke(claims, arms, work, scratch, log=lambda line: None)
    assert outcome["sys"] == "missing Recall@10" and outcome["broken"].startswith("failed: Zero")
    assert set(outcome) == {"sys", "broken"}  # base was made in work: not tried again
    assert (scratch / "arms" / "sys" / "seed0.json").is_file()
    assert not (work / "arms" / "sys" / "seed0.json").exists()
    seen = []
    monkeypatch.setattr(trainer, "train", lambda config, path, *a, **k: seen.append(config))
    with smoke.token_runs():
        trainer.train(_tiny_run_config(), tmp_path / "run")
    assert (seen[0].train.epochs, seen[0].train.steps_per_epoch) == (1, smoke.STEPS)
    assert seen[0].eval.valid_users == smoke.VALID_USERS


def _tiny_run_config():
    from attnsvm.rec.config import DataConfig, ModelChoice, RunConfig

    return RunConfig(model=ModelChoice("sasrec+"), data=DataConfig(dataset="ml-100k"))


def test_report_table_and_forest_plot(tmp_path: Path) -> None:
    arms, results = _arms([]), tmp_path / "campaign.csv"
    claim = _claim(paper="+5 %")
    for seed in (0, 1, 2):
        runner.run_cell(claim, seed, arms, tmp_path / "work", results)
    rows = runner.read_rows(results)
    beyond = _claim(id="beyond", out_of_reach="≈ 131 CPU-hours.")
    text = report.table([claim, _claim(id="queued"), beyond], rows)
    assert "**supported**" in text and "3/3" in text and "+5 %" in text
    assert "Queued, no seed finished yet: `queued`." in text
    assert "Out of reach on this machine" in text and "- `beyond` (tiny): c. ≈ 131" in text
    target = tmp_path / "RESULTS.md"
    target.write_text(f"before\n{report.START}\nold\n{report.END}\nafter\n")
    report.publish([claim], rows, targets=(target,), figure=tmp_path / "campaign.svg")
    content = target.read_text()
    assert content.startswith("before\n") and content.endswith("after\n") and "old" not in content
    assert (tmp_path / "campaign.svg").read_text().count("<svg") == 1


TINY_MANIFEST = """
import time
from campaign.arms import Arm, Outcome
from campaign.claims import Claim

def _make(value, sleep):
    def make(seed, space):
        time.sleep(sleep)
        return Outcome({"NDCG@10": value}, 1)
    return make

ARMS = {
    "quick-a": Arm("quick-a", "tiny", _make(0.2, 0)),
    "quick-b": Arm("quick-b", "tiny", _make(0.1, 0)),
    "slow": Arm("slow", "tiny", _make(0.3, 600)),
}
def _claim(id, system_arm, priority, minutes):
    return Claim(id, "tiny", "c", "d", "p", system_arm, "quick-b", "NDCG@10", minutes=minutes,
                 priority=priority, seeds=(0,))
CLAIMS = [_claim("quick", "quick-a", 0, 0.01), _claim("slow", "slow", 1, 0.02)]
"""


def test_scheduler_runs_cells_in_children_and_stops_at_the_budget(tmp_path: Path) -> None:
    (tmp_path / "tiny_manifest.py").write_text(textwrap.dedent(TINY_MANIFEST))
    results, work = tmp_path / "campaign.csv", tmp_path / "work"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(BENCHMARKS)])}
    command = [sys.executable, str(BENCHMARKS / "campaign"), "run", "--cores", "1"]
    # each cell is a child interpreter, which imports torch only for an arm that trains (these
    # do not: it starts in a fraction of a second); 90 s of headroom for a machine running two
    # suites on 2 cores, where a child that imported torch once outlasted a 45 s budget
    command += ["--budget", "1.5m", "--manifest", "tiny_manifest"]
    command += ["--work", str(work), "--results", str(results)]
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - start < 200  # the 600 s cell was stopped at the 90 s budget
    assert "budget spent" in done.stdout
    assert runner.finished_cells(results) == {("quick", 0)}
    log = (work / "logs" / "quick-seed0.log").read_text()
    assert "1 row(s)" not in log and "2 row(s) written" in log
    # stopped at the budget, the slow cell counted the CPU it gave its arm, as a slice does
    assert "stopped by signal" in (work / "logs" / "slow-seed0.log").read_text()
    assert float((work / "arms" / "slow" / "seed0.slices").read_text()) >= 0
    # the stopped cell left no rows, and a rerun of the finished one does nothing
    listing = subprocess.run(
        [*command[:2], "pending", "--manifest", "tiny_manifest", "--results", str(results)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert listing.stdout.split()[0] == "slow-seed0"


def test_duration_parsing() -> None:
    sys.path.insert(0, str(BENCHMARKS / "campaign"))
    from importlib import import_module

    main = import_module("campaign.__main__")
    assert main.duration("90m") == 5400 and main.duration("1h30m") == 5400
    assert main.duration("2h") == 7200 and main.duration("45") == 2700
    with pytest.raises(Exception, match="duration"):
        main.duration("soon")


def test_a_sliced_arm_resumes_and_adds_up_its_cpu(tmp_path: Path) -> None:
    from campaign.arms import SliceLimit, SliceSpent, Workspace

    attempts: list[int] = []

    def make(seed: int, space) -> Outcome:
        attempts.append(seed)
        busy = time.process_time() + 0.05
        while time.process_time() < busy:  # some CPU in each slice
            pass
        if len(attempts) == 1:
            raise SliceSpent("slice spent after epoch 1")
        return Outcome({"NDCG@10": 0.5}, 7)

    arms = {"long": Arm("long", "tiny", make), "base": _arms([])["base"]}
    claim = _claim(system_arm="long")
    with pytest.raises(SliceSpent):
        runner.run_cell(claim, 0, arms, tmp_path / "work", tmp_path / "campaign.csv")
    assert not (tmp_path / "campaign.csv").exists()  # a spent slice writes no rows
    rows = runner.run_cell(claim, 0, arms, tmp_path / "work", tmp_path / "campaign.csv")
    long = next(r for r in rows if r["arm"] == "long")
    assert attempts == [0, 0] and long["epochs"] == 7
    assert long["cpu_seconds"] >= 0.09  # both slices' CPU, not the last one's alone
    assert Workspace(tmp_path / "work", arms).done("long", 0)

    class State:
        run_dir, epoch = tmp_path, 3

    SliceLimit(minutes=60).on_epoch_end(State())  # within its slice: nothing happens
    with pytest.raises(SliceSpent, match="after epoch 3"):
        SliceLimit(minutes=0).on_epoch_end(State())


def test_staged_arms_resolve_to_their_stated_protocols(tmp_path: Path) -> None:
    """BiCAT's and MrTransformer's campaign arms: the recipes with their cut epochs, and the
    baselines as the fine-tuning stage from fresh weights, without the staged mechanism."""
    from attnsvm.rec.config import RunConfig
    from attnsvm.rec.eval.sampled import sampled_label
    from attnsvm.rec.train.recipe import resolve_recipe
    from campaign import manifest

    plan = resolve_recipe(
        "bicat", tmp_path / "b", "beauty", None, manifest.bicat_overrides("no_leak", 2)
    )
    pretrain, generate, finetune = plan["stages"]
    assert generate["settings"]["mode"] == "no_leak"
    for stage in (pretrain, finetune):
        train = stage["settings"]["train"]
        assert (train["epochs"], train["seed"], train["patience"]) == (
            manifest.BICAT_EPOCHS,
            2,
            1000,
        )
    assert finetune["settings"]["train"]["init_from"] == pretrain["folder"]
    # both generation modes take the one pre-training arm's run as their first stage
    for mode in ("faithful", "no_leak"):
        overrides = manifest.bicat_overrides(mode, 2)
        plan_of = resolve_recipe("bicat", tmp_path / mode, "beauty", str(manifest.ROOT), overrides)
        shared = manifest.staged_config(
            "bicat", "pretrain", "beauty", manifest.BICAT_PRETRAIN_CHANGES, 2
        )
        assert RunConfig.from_dict(plan_of["stages"][0]["settings"]) == shared
    assert manifest.ARMS[manifest.BICAT_RECIPES["faithful"].key].needs == (
        manifest.BICAT_PRETRAIN.key,
    )
    backbone = manifest.staged_config(
        "bicat", "finetune", "beauty", manifest.BICAT_BACKBONE_CHANGES, 2
    )
    assert backbone.train.init_from is None and backbone.data.synthetic_prefix is None
    assert backbone.model.overrides["kl_weight"] == 0 and backbone.data.synthetic_items == 0
    assert backbone.eval.sampled_negatives == finetune["settings"]["eval"]["sampled_negatives"]
    # the sampled claims read the metric under the name the evaluation gives it
    label = sampled_label(backbone.eval.sampled_negatives, backbone.eval.sampled_sampler)
    assert f"NDCG@10 ({label})" == manifest.BICAT_SAMPLED_METRIC
    assert backbone.loss == type(backbone.loss).from_dict(finetune["settings"]["loss"])

    plan = resolve_recipe(
        "mrtransformer", tmp_path / "m", "beauty", None, manifest.mrtransformer_overrides(1)
    )
    epochs = [stage["settings"]["train"]["epochs"] for stage in plan["stages"]]
    assert epochs == list(manifest.MR_EPOCHS)
    alone = manifest.staged_config(
        "mrtransformer", "finetune", "beauty", manifest.MR_FINETUNE_CHANGES, 1
    )
    assert alone.train.init_from is None and alone.train.epochs == sum(manifest.MR_EPOCHS)
    assert alone.train.warmup_steps == plan["stages"][1]["settings"]["train"]["warmup_steps"] == 500
    # validation on a sample only where the stage keeps its last epoch (there it changes nothing
    # trained); a stage that keeps its best epoch is validated on every user
    mr_pretrain, mr_finetune = (stage["settings"] for stage in plan["stages"])
    sampled = [pretrain["settings"], finetune["settings"], mr_pretrain, backbone.to_dict()]
    for settings in sampled:
        assert settings["eval"]["valid_users"] == manifest.DIAGNOSTIC_VALID_USERS
        assert settings["train"]["keep"] == "last"
    assert mr_finetune["train"]["keep"] == "best" and alone.train.keep == "best"
    assert mr_finetune["eval"].get("valid_users") is None and alone.eval.valid_users is None


TWO_STAGES = {
    "name": "two",
    "stage": [
        {
            "name": "pretrain",
            "kind": "train",
            "settings": {
                "model": {"name": "sasrec+", "hidden_size": 8, "ffn_size": 8, "num_blocks": 1},
                "train": {"epochs": 2, "batch_size": 32, "keep": "last"},
                "eval": {"ks": [10]},
            },
        },
        {
            "name": "finetune",
            "kind": "train",
            "settings": {
                "model": {"name": "sasrec+", "hidden_size": 8, "ffn_size": 8, "num_blocks": 1},
                "train": {"epochs": 1, "batch_size": 32},
                "eval": {"ks": [10]},
            },
            "start_from": "pretrain",
        },
    ],
}


def test_recipes_sharing_a_stage_take_its_run_and_train_the_rest(
    tmp_path: Path, monkeypatch
) -> None:
    """BiCAT's two generation modes share one pre-training: the stage's arm is trained once,
    each recipe copies its run in as that finished stage (weights bit for bit) and trains only
    what follows; a shared run whose settings are not the stage's is refused."""
    from attnsvm.rec.config import RunConfig
    from attnsvm.rec.train.checkpoint import read_weights
    from attnsvm.rec.train.recipe import resolve_recipe
    from campaign.arms import Workspace, recipe_arm, trained
    from tests.walks import write_walks

    data, recipe = write_walks(tmp_path / "walks.txt"), tmp_path / "two.json"
    recipe.write_text(json.dumps(TWO_STAGES))

    def pretrain_config(seed: int, epochs: int = 2) -> RunConfig:
        plan = resolve_recipe(
            str(recipe), tmp_path / "plan", str(data), None, [f"train.seed={seed}"]
        )
        settings = plan["stages"][0]["settings"]
        settings["train"]["epochs"] = epochs
        return RunConfig.from_dict(settings)

    def arms(pretrain_epochs: int) -> dict[str, Arm]:
        shared = trained("pre", "sasrec+", lambda seed: pretrain_config(seed, pretrain_epochs))
        made = {"pre": shared}
        for key in ("mode-a", "mode-b"):
            overrides = lambda seed: [f"train.seed={seed}"]  # noqa: E731
            made[key] = recipe_arm(
                key, "sasrec+", str(recipe), str(data), None, overrides, {"pretrain": "pre"}
            )
        return made

    from attnsvm.rec.train import trainer

    trained_paths, train = [], trainer.train

    def spy(config, path, *args, **kwargs):
        trained_paths.append(Path(path).relative_to(tmp_path).as_posix())
        return train(config, path, *args, **kwargs)

    monkeypatch.setattr(trainer, "train", spy)
    space = Workspace(tmp_path / "work", arms(2))
    for key in ("mode-a", "mode-b"):
        space.result(key, 1)
    stages = [f"work/runs/mode-{m}/seed1/recipe/2-finetune" for m in "ab"]
    assert trained_paths == ["work/runs/pre/seed1/run", *stages]  # the pre-training once
    pre = read_weights(space.folder("pre", 1) / "run" / "model.safetensors")
    for key in ("mode-a", "mode-b"):
        stages = space.folder(key, 1) / "recipe"
        copied = read_weights(stages / "1-pretrain" / "model.safetensors")
        assert all(torch.equal(copied[name], pre[name]) for name in pre)
        finetuned = read_weights(stages / "2-finetune" / "model.safetensors")
        assert not all(torch.equal(finetuned[name], pre[name]) for name in pre)
    records = [
        json.loads((tmp_path / "work" / "arms" / k / "seed1.json").read_text())
        for k in ("pre", "mode-a")
    ]
    assert records[1]["epochs"] == 1  # the recipe's own training: the fine-tuning epoch
    space = Workspace(tmp_path / "other", arms(3))  # the shared run trained 3 epochs, not 2
    with pytest.raises(ValueError, match="not the settings"):
        space.result("mode-a", 0)


def test_ml1m_budget_arms_spend_about_the_same_cpu() -> None:
    """The every-prefix models' ML-1M cells: every arm's schedule costs the stated budget, to
    within one of its epochs (SASRec+) or one step an epoch (the every-prefix models)."""
    from campaign import manifest

    budget = manifest.ML1M_BUDGET_MINUTES * 60
    for name, (seconds, whole) in manifest.ML1M_STEPS.items():
        epochs, steps = manifest.budget_schedule(name)
        config = manifest.budget_config(name, 0)
        assert (config.train.epochs, config.train.steps_per_epoch) == (epochs, steps)
        assert config.eval.valid_users == 1000
        spent = epochs * (whole if steps is None else steps) * seconds
        slack = (whole if steps is None else epochs) * seconds
        assert budget - slack <= spent <= budget + slack, name


class ReachedTraining(Exception):
    """Raised by the stand-in trainer: the arm built its run and handed it over."""


def test_every_arm_builds_a_valid_run_and_reaches_training(tmp_path: Path, monkeypatch) -> None:
    """Each manifest arm, its stage-1 runs taken as made, gets as far as the trainer (the
    pointwise one, the recipe runner, the simulator fit) with a config that validates and
    round-trips: an arm whose setup is broken fails here, not an hour into a campaign."""
    import json

    from attnsvm.rec.config import RunConfig, validate
    from attnsvm.rec.config_base import ConfigError
    from attnsvm.rec.train import pointwise, recipe, trainer
    from attnsvm.rec.train.checkpoint import RunDirError
    from campaign import manifest
    from campaign.arms import Workspace

    def stand_in_train(config: RunConfig, path, *args, **kwargs):
        validate(config)
        assert RunConfig.from_dict(config.to_dict()) == config
        raise ReachedTraining(path)

    def stand_in(*args, **kwargs):
        raise ReachedTraining(args)

    monkeypatch.setattr(trainer, "train", stand_in_train)
    monkeypatch.setattr(pointwise, "train_pointwise", stand_in_train)
    monkeypatch.setattr(recipe, "resume_recipe", stand_in)
    monkeypatch.setattr(manifest, "simulator_folder", stand_in)
    space = Workspace(tmp_path, manifest.ARMS)
    for arm in manifest.ARMS.values():
        for need in arm.needs:
            record = tmp_path / "arms" / need / "seed0.json"
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps({"metrics": {}, "epochs": 0, "cpu_seconds": 0}))
    for key, arm in manifest.ARMS.items():
        try:
            arm.make(0, space)
        except ReachedTraining:
            continue
        except (FileNotFoundError, RunDirError, ConfigError) as missing:  # a stage-1 run not made
            needed = [str(space.folder(need, 0)) for need in arm.needs]
            assert any(folder in str(missing) for folder in needed), (key, missing)
            continue
        assert arm.make.__qualname__.startswith("published_arm"), f"{key}: no training"
